from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from benchmarks.api import router as benchmarks_router
from core.api import api_not_found, build_api
from gateway.api import router as gateway_router
from jobs.api import router as jobs_router
from jobs.weights.api import router as model_files_router
from lanes.api import router as lanes_router
from metrics.api import router as metrics_router
from portal import oidc_views, views
from routing.api import router as routing_router

handler400 = "portal.views.bad_request"
api = build_api([lanes_router, jobs_router, model_files_router, routing_router, gateway_router, metrics_router,
                 benchmarks_router])

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", oidc_views.Login.as_view(), name="login"),
    path("oidc/authenticate/", oidc_views.Authenticate.as_view(), name="oidc_authentication_init"),
    path("oidc/callback/", oidc_views.Callback.as_view(), name="oidc_authentication_callback"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("core.urls")),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("api/<path:rest>", api_not_found),
    path("", include("lanes.urls")),
    path("", include("jobs.urls")),
    path("", include("jobs.weights.urls")),
    path("", include("gateway.urls")),
    path("", include("routing.urls")),
    path("", include("benchmarks.urls")),
    path("", include("metrics.urls")),
]

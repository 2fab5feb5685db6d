from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path

from benchmarks.api import router as benchmarks_router
from jobs.api import router as jobs_router
from lanes.api import router as lanes_router
from portal import views
from portal.api import api_not_found, build_api
from routing.api import router as routing_router

handler400 = "portal.views.bad_request"
api = build_api([lanes_router, jobs_router, routing_router, benchmarks_router])

urlpatterns = [
    path("", views.dashboard, name="dashboard"),
    path("healthz", views.healthz, name="healthz"),
    path("accounts/login/", auth_views.LoginView.as_view(), name="login"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("accounts/set-password/<uidb64>/<token>/", views.PasswordSetView.as_view(), name="password_set"),
    path("users/", views.users_page, name="users"),
    path("users/<int:user_id>/<slug:action>/", views.user_action, name="user_action"),
    path("admin/", admin.site.urls),
    path("api/", api.urls),
    path("api/<path:rest>", api_not_found),
    path("", include("lanes.urls")),
    path("", include("jobs.urls")),
    path("", include("routing.urls")),
    path("", include("benchmarks.urls")),
    path("", include("metrics.urls")),
]

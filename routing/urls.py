"""Gateway pages. The OpenAI-compatible /v1/... and /lanes/<lane>/v1/... endpoints are not
Django URLs: portal/asgi.py hands them to routing.gateway before Django (see there)."""

from django.urls import URLPattern, URLResolver, path

from routing import views
from routing.router import views as router_views

app_name = "routing"
urlpatterns: list[URLPattern | URLResolver] = [
    path("gateway/", views.gateway_home, name="gateway"),
    path("gateway/keys/<int:key_id>/revoke", views.key_revoke, name="key-revoke"),
    path("gateway/requests/", views.requests_page, name="requests"),
    path("gateway/shadow/", views.shadow_page, name="shadow"),
    path("routing/", router_views.prototypes_page, name="router-prototypes"),
    path("routing/prototypes/<int:prototype_id>/", router_views.prototype_edit, name="router-prototype"),
    path("routing/prototypes/<int:prototype_id>/delete", router_views.prototype_remove, name="router-prototype-delete"),
    path("routing/prototypes/import", router_views.prototypes_import_view, name="router-prototypes-import"),
    path("routing/prototypes/export", router_views.prototypes_export, name="router-prototypes-export"),
    path("routing/eval/", router_views.eval_page, name="router-eval"),
    path("routing/eval/import", router_views.eval_import_view, name="router-eval-import"),
    path("routing/playground/", router_views.playground, name="router-playground"),
    path("routing/playground/send", router_views.playground_send, name="router-playground-send"),
    path("routing/versions/", router_views.versions_page, name="router-versions"),
    path("routing/versions/<int:number>/", router_views.version_page, name="router-version"),
    path("routing/versions/<int:number>/evaluate", router_views.version_evaluate, name="router-evaluate"),
    path("routing/versions/<int:number>/publish", router_views.version_publish, name="router-publish"),
    path("routing/shadow/", router_views.shadow_page, name="router-shadow"),
]

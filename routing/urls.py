"""Gateway pages. The OpenAI-compatible /v1/... and /lanes/<lane>/v1/... endpoints are not
Django URLs: portal/asgi.py hands them to routing.gateway before Django (see there)."""

from django.urls import URLPattern, URLResolver, path

from routing import views

app_name = "routing"
urlpatterns: list[URLPattern | URLResolver] = [
    path("gateway/", views.gateway_home, name="gateway"),
    path("gateway/keys/<int:key_id>/revoke", views.key_revoke, name="key-revoke"),
    path("gateway/requests/", views.requests_page, name="requests"),
    path("gateway/shadow/", views.shadow_page, name="shadow"),
]

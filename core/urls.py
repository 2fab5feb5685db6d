"""Users (admins only), the invite link's set-password page, your personal access tokens."""

from django.urls import URLPattern, path

from core import token_views, views

urlpatterns: list[URLPattern] = [
    path("accounts/set-password/<uidb64>/<token>/", views.password_set, name="password_set"),
    path("users/", views.users_page, name="users"),
    path("users/<int:user_id>/<slug:action>/", views.user_action, name="user_action"),
    path("account/tokens/", token_views.tokens_page, name="tokens"),
    path("account/tokens/<int:token_id>/revoke", token_views.token_revoke, name="token_revoke"),
]

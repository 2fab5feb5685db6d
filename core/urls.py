"""Users (admins only) and the invite link's set-password page."""

from django.urls import URLPattern, path

from core import views

urlpatterns: list[URLPattern] = [
    path("accounts/set-password/<uidb64>/<token>/", views.password_set, name="password_set"),
    path("users/", views.users_page, name="users"),
    path("users/<int:user_id>/<slug:action>/", views.user_action, name="user_action"),
]

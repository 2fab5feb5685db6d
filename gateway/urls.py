"""Gateway pages. The OpenAI-compatible /v1/... and /lanes/<lane>/v1/... endpoints are not
Django URLs: portal/asgi.py hands them to the gateway before Django (gateway/asgi.py)."""

from django.urls import URLPattern, URLResolver, path

from gateway import views

app_name = "gateway"
urlpatterns: list[URLPattern | URLResolver] = [
    path("gateway/", views.gateway_home, name="gateway"),
    path("gateway/keys/<int:key_id>/revoke", views.key_revoke, name="key-revoke"),
    path("teams/", views.teams_page, name="teams"),
    path("teams/<int:team_id>/", views.team_page, name="team"),
    path("teams/<int:team_id>/budgets", views.team_budget_set, name="team-budget-set"),
    path("teams/<int:team_id>/budgets/<int:budget_id>/reset", views.team_budget_reset, name="team-budget-reset"),
    path("gateway/mirror/", views.mirror_page, name="mirror"),
    # The draft router's decisions on live traffic, read from the gateway's request log.
    path("routing/shadow/", views.draft_shadow_page, name="draft-shadow"),
    # The agents' outcomes (POST /v1/feedback) joined to the request log.
    path("routing/outcomes/", views.outcomes_page, name="outcomes"),
    # A version replayed on the captured prompts (ApiKey.log_prompts).
    path("routing/replay/", views.replay_page, name="replay"),
]

"""A refused page explains itself inside the portal's layout, instead of a bare "403 Forbidden"."""

from __future__ import annotations

from django.test import Client


def test_a_refused_page_says_which_role_is_missing_in_the_portal_layout(viewer_client: Client) -> None:
    response = viewer_client.get("/gateway/")
    assert response.status_code == 403
    body = response.content.decode()
    assert "Your role may not operate nodes, lanes, jobs and API keys." in body
    assert 'href="/lanes/"' in body  # the navigation is there: the user can go on reading

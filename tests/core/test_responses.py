"""The one CSV download (core.responses.csv_response): its format, its filename rule, and
the exports that use it (benchmarks' are in tests/benchmarks)."""

from __future__ import annotations

import pytest
from django.test import Client

from core.responses import csv_response
from routing.imports import LabelledText, parse_labelled
from routing.models import Prototype


def test_a_csv_download_is_utf8_rfc4180_and_names_its_file() -> None:
    response = csv_response([["label", "text"], ["a", 'says "hi", then\nleaves'], ["b", "=1+1"], ["c", "café"]],
                            filename="labelled_texts-2.csv")
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="labelled_texts-2.csv"'
    # Quoted where a cell needs it, CRLF line ends; a formula-like cell kept as written.
    assert response.content.decode() == 'label,text\r\na,"says ""hi"", then\nleaves"\r\nb,=1+1\r\nc,café\r\n'


@pytest.mark.parametrize("filename", ['a".csv', "a.txt", "../a.csv", "", "a b.csv", "é.csv", "a\r\n.csv",
                                      "x" * 101 + ".csv"])
def test_a_filename_outside_the_rule_is_refused_naming_it(filename: str) -> None:
    with pytest.raises(ValueError, match=r"filename must be letters, digits, '\.', '_' or '-' \(at most 100\) "
                                         r"ending in \.csv, got"):
        csv_response([["a"]], filename=filename)


def test_the_prototype_export_is_that_download_and_reads_back(db: None, viewer_client: Client,
                                                               outsider_client: Client) -> None:
    Prototype.objects.create(text='Refactor "billing", then\nrun the tests', label="long_reasoning")
    Prototype.objects.create(text="=SUM(A1:A2) what is this formula", label="quick", enabled=False)
    response = viewer_client.get("/routing/prototypes/export?format=csv")
    assert response.status_code == 200
    assert response["Content-Type"] == "text/csv; charset=utf-8"
    assert response["Content-Disposition"] == 'attachment; filename="prototypes.csv"'
    assert response.content.decode().startswith("label,text,enabled\r\n")
    assert parse_labelled(response.content.decode(), "csv") == [
        LabelledText('Refactor "billing", then\nrun the tests', "long_reasoning", True),
        LabelledText("=SUM(A1:A2) what is this formula", "quick", False),
    ]
    assert outsider_client.get("/routing/prototypes/export?format=csv").status_code == 403


@pytest.mark.django_db
def test_a_post_to_the_api_without_a_session_is_401_and_with_one_but_no_token_403_naming_csrf(viewer_user):
    """Even where the API's own auth never runs (/api/ itself): no session → 401 "log in first",
    as every endpoint answers; a session without the CSRF token → 403 naming the check; JSON."""
    from django.test import Client

    anonymous = Client(enforce_csrf_checks=True)
    for path in ("/api/", "/api/lanes"):
        response = anonymous.post(path, data="{}", content_type="application/json")
        assert response.status_code == 401, path
        assert response.json() == {"detail": "Log in first (session cookie and CSRF token), or send a live "
                                             "personal access token: Authorization: Bearer pat-…"}
    signed_in = Client(enforce_csrf_checks=True)
    signed_in.force_login(viewer_user)
    response = signed_in.post("/api/", data="{}", content_type="application/json")
    assert response.status_code == 403 and response.json()["detail"].startswith("CSRF check failed")
    page = signed_in.post("/lanes/new/", data={})  # a page keeps Django's own 403 page
    assert page.status_code == 403 and "text/html" in page["Content-Type"]


def test_a_number_rule_is_written_out_in_full():
    """"at most 1048576", not "at most 1.04858e+06"."""
    from django.core.exceptions import ValidationError

    from core.validators import FiniteNumber

    with pytest.raises(ValidationError) as caught:
        FiniteNumber(0, 1048576.0)(2e6)
    assert caught.value.messages == ["Enter a number at least 0 and at most 1048576."]


def test_a_403_is_one_log_line_even_with_debug_on():
    """The demo runs with PORTAL_DEBUG=1, where Django's own console handler printed each 403
    with its traceback (104 in one tour's web.log): only the root's filtered handler logs."""
    import os
    import subprocess
    import sys
    from pathlib import Path

    script = ("import django; django.setup()\n"
              "from django.core.exceptions import PermissionDenied\n"
              "from django.core.handlers.exception import response_for_exception\n"
              "from django.test import RequestFactory\n"
              "response_for_exception(RequestFactory().get('/users/'), PermissionDenied('no'))\n")
    env = {**os.environ, "PORTAL_DEBUG": "1", "DJANGO_SETTINGS_MODULE": "portal.settings"}
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120,
                            cwd=Path(__file__).resolve().parents[2], check=True)
    lines = [line for line in (result.stderr + result.stdout).splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].endswith("WARNING django.request Forbidden (Permission denied): /users/"), lines

"""The run command tells its workers where its own gateway is."""

from __future__ import annotations

import pytest

from portal.launcher import Launcher


def test_the_workers_gateway_url_follows_the_run_commands_port(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PORTAL_GATEWAY_URL", raising=False)
    assert Launcher("127.0.0.1", 8123).env["PORTAL_GATEWAY_URL"] == "http://127.0.0.1:8123"
    assert Launcher("0.0.0.0", 8124).env["PORTAL_GATEWAY_URL"] == "http://127.0.0.1:8124"  # noqa: S104
    monkeypatch.setenv("PORTAL_GATEWAY_URL", "https://portal.example/")
    assert Launcher("127.0.0.1", 8123).env["PORTAL_GATEWAY_URL"] == "https://portal.example/"

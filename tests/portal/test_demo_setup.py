"""`manage.py demo_setup` (what `make run` runs) loads every app's registered demo data: the
simulated cluster and seed 000's lanes, then the starter router, published, so the
playground decides and model="auto" routes by the router on a fresh demo."""

from __future__ import annotations

from io import StringIO

import pytest
from django.core.management import call_command

from core.demo import DEMO_DATA
from routing.decision import decide
from routing.engine import router_encoder
from routing.models import EvalPrompt, Prototype, RouterVersion, VersionStatus
from routing.published import load_router_state

pytestmark = pytest.mark.django_db


def test_every_app_plugs_its_demo_data_in_and_lanes_come_before_the_router() -> None:
    order = [data.name for data in sorted(DEMO_DATA.values(), key=lambda data: (data.order, data.name))]
    assert order == ["lanes", "routing"]


def test_demo_setup_publishes_the_starter_router_over_the_demo_lanes(settings, tmp_path) -> None:
    settings.VAR_DIR = tmp_path
    settings.SIM_ROOT = tmp_path / "sparksim"
    out = StringIO()
    call_command("demo_setup", stdout=out)
    printed = out.getvalue()
    assert "router v1 published" in printed and printed.strip().splitlines()[-1].startswith("LOGIN admin ")
    assert Prototype.objects.count() > 0 and EvalPrompt.objects.count() == 190
    assert list(RouterVersion.objects.values_list("number", "status")) == [(1, VersionStatus.PUBLISHED)]
    # The first tour's step 5: the playground's prompt goes to deepseek by the router's label.
    state = load_router_state("demo")
    assert state.published is not None and state.unavailable is None
    query = router_encoder().embed(["Prove that there are infinitely many primes."])[0]
    decision = decide(query, state.published.prototypes, state.published.config, usable=lambda name: True)
    assert (decision.label, decision.lane) == ("long_reasoning", "deepseek")
    again = StringIO()
    call_command("demo_setup", stdout=again)  # idempotent: nothing loaded twice
    assert RouterVersion.objects.count() == 1 and "published" not in again.getvalue().replace("LOGIN", "")

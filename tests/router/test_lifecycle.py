"""The policy lifecycle: draft → shadow (sampled, stops after N) → active → revert, audited;
a revert reaches every gateway process's router state at its next check."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aredis

from core.models import AuditEvent
from gateway.judge import _save as _save_judged
from gateway.route import RouterRuntime, _with_shadow
from routing.decision import decide
from routing.models import RouterVersion, VersionStatus
from routing.published import PublishedRouter, load_router_state
from routing.services import (
    previous_active_version,
    router_version_create_draft,
    router_version_publish,
    router_version_revert,
    router_version_set_shadow,
)
from routing.shadow import StopRule, shadow_count, shadow_stop_reason
from tests.gateway.conftest import run_async

# Committed for real: the gateway's routers read the database from their own threads, and a
# publish announces itself to Redis on commit.
pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def v2_active(starter, admin_user) -> RouterVersion:
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    return router_version_publish(actor=admin_user, version=draft)


def test_revert_restores_the_previous_active_version_and_is_audited(v2_active, admin_user):
    assert previous_active_version().number == 1
    restored = router_version_revert(actor=admin_user)
    assert restored.number == 1 and restored.status == VersionStatus.PUBLISHED
    assert RouterVersion.objects.get(number=2).status == VersionStatus.RETIRED
    event = AuditEvent.objects.filter(action="router.revert").latest("id")
    assert event.diff["version"] == [2, 1]
    assert previous_active_version().number == 2  # a second revert goes forward again


def test_revert_without_an_earlier_version_is_refused(starter, admin_user):
    with pytest.raises(Exception, match="No earlier active version"):
        router_version_revert(actor=admin_user)


def test_a_revert_reaches_every_gateway_processs_router(v2_active, admin_user, settings):
    """Two routers (as two gateway processes hold them) on the same Redis: each one sees the
    revert at its next check (ROUTER_VERSION_CHECK_S, 0.25 s in production)."""
    settings.ROUTER_VERSION_CHECK_S = 0

    async def versions() -> list[int | None]:
        clients = [aredis.Redis.from_url(settings.REDIS_URL) for _ in range(2)]
        routers = [PublishedRouter(c) for c in clients]
        before = [(await r.state()).published.number for r in routers]  # type: ignore[union-attr]
        await asyncio.to_thread(router_version_revert, actor=admin_user)
        after = [(await r.state()).published.number for r in routers]  # type: ignore[union-attr]
        for c in clients:
            await c.aclose()
        return before + after

    assert run_async(versions) == [2, 2, 1, 1]


def test_the_shadow_stops_sampling_after_its_limit(starter, admin_user, settings):
    settings.ROUTER_SHADOW_SHARE = 1.0
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    RouterVersion.objects.filter(pk=draft.pk).update(shadow_limit=3)
    router_version_set_shadow(actor=admin_user, version=draft)
    state = load_router_state("t")
    assert state.shadow is not None and state.shadow.stop.sample_limit == 3
    vector = state.encoder.embed(["What port does SSH use?"])[0]  # type: ignore[union-attr]
    decision = decide(vector, state.published.prototypes, state.published.config, usable=lambda _l: True)  # type: ignore[union-attr]

    async def sample(n: int) -> list[int | None]:
        client = aredis.Redis.from_url(settings.REDIS_URL)
        rt = RouterRuntime(client)
        shadows = []
        for _ in range(n):
            shadows.append(_with_shadow(rt, state, vector, decision).shadow_version)
            await asyncio.gather(*list(rt._writes))  # the count lands before the next request here
        await client.aclose()
        return shadows

    assert run_async(lambda: sample(5)) == [draft.number] * 3 + [None, None]
    assert shadow_count(draft.number) == 3
    router_version_set_shadow(actor=admin_user, version=draft)  # set again: samples afresh
    assert shadow_count(draft.number) == 0


def test_the_shadow_stops_when_the_agreement_interval_excludes_its_threshold(starter, admin_user, settings):
    """A draft identical to the published version agrees every time: the Wilson lower bound
    of n/n at 95% passes 0.5 at n = 4 (0.207, 0.342, 0.439, 0.510), so sampling stops there,
    long before the sample limit, in every process (the reason is shared in Redis)."""
    settings.ROUTER_SHADOW_SHARE = 1.0
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    router_version_set_shadow(actor=admin_user, version=draft, rules={
        "stop_metric": "agreement", "stop_threshold": 0.5, "stop_confidence": 0.95, "shadow_limit": 1000})
    state = load_router_state("t")
    vector = state.encoder.embed(["What port does SSH use?"])[0]  # type: ignore[union-attr]
    decision = decide(vector, state.published.prototypes, state.published.config, usable=lambda _l: True)  # type: ignore[union-attr]

    async def sample(n: int) -> list[int | None]:
        client = aredis.Redis.from_url(settings.REDIS_URL)
        rt = RouterRuntime(client)
        shadows = []
        for _ in range(n):
            shadows.append(_with_shadow(rt, state, vector, decision).shadow_version)
            await asyncio.gather(*list(rt._writes))
        await client.aclose()
        return shadows

    assert run_async(lambda: sample(6)) == [draft.number] * 4 + [None, None]
    assert "above 0.5" in shadow_stop_reason(draft.number) and "4/4" in shadow_stop_reason(draft.number)
    # Another process learns of the stop at its next count: one sample more at most.
    assert run_async(lambda: sample(3)) == [draft.number, None, None]
    router_version_set_shadow(actor=admin_user, version=draft)  # set again: samples afresh
    assert shadow_stop_reason(draft.number) == ""


def test_the_shadow_stops_when_the_judged_win_rate_interval_excludes_its_threshold(starter, admin_user):
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    rule = StopRule(1000, "win_rate", 0.5, 0.95)
    row = {"request_id": "r", "router_version": draft.number, "published_lane": "deepseek", "draft_lane": "qwen",
           "judge_lane": "qwen", "verdict": "draft"}
    for n in range(3):
        _save_judged({**row, "request_id": f"r{n}"}, rule)
        _save_judged({**row, "request_id": f"t{n}", "verdict": "tie"}, rule)  # ties are left out
    assert shadow_stop_reason(draft.number) == ""  # 3/3: [0.439, 1]
    _save_judged({**row, "request_id": "r3"}, rule)
    assert "judged win rate of the draft is above 0.5" in shadow_stop_reason(draft.number)


def test_the_shadow_page_offers_activate_and_revert_with_what_changes(v2_active, admin_user, lead_client, viewer_client):
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=2))
    router_version_set_shadow(actor=admin_user, version=draft)
    page = lead_client.get("/routing/shadow/").content.decode()
    assert 'id="activate"' in page and f"/routing/versions/{draft.number}/publish" in page
    assert 'id="revert"' in page and "Revert to v1" in page and 'id="shadow-samples"' in page
    assert 'id="activate"' not in viewer_client.get("/routing/shadow/").content.decode()
    confirm = lead_client.get("/routing/versions/revert").content.decode()
    assert "Revert to v1?" in confirm and 'id="changes"' in confirm
    assert lead_client.post("/routing/versions/revert").status_code == 302
    assert RouterVersion.objects.get(status=VersionStatus.PUBLISHED).number == 1


@pytest.mark.parametrize("role", ["viewer", "outsider"])
def test_only_a_team_lead_may_revert(v2_active, role_clients, role):
    assert role_clients[role].post("/routing/versions/revert").status_code == 403
    assert RouterVersion.objects.get(status=VersionStatus.PUBLISHED).number == 2




def test_the_shadow_form_refuses_a_bad_rule_naming_it_and_changes_nothing(starter, admin_user, lead_client, role_clients):
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    answer = lead_client.post("/routing/shadow/", {"version": draft.number, "judge_share": "lots", "judge_lane": "qwen"},
                              follow=True)
    assert answer.status_code == 200 and "The judged share is a share from 0 (off) to 1." in answer.content.decode()
    assert not RouterVersion.objects.get(pk=draft.pk).shadow
    assert role_clients["viewer"].post("/routing/shadow/", {"version": draft.number}).status_code == 403
    lead_client.post("/routing/shadow/", {"version": draft.number, "judge_share": "0.25", "judge_lane": "qwen",
                                          "stop_metric": "win_rate", "stop_threshold": "0.6"})
    saved = RouterVersion.objects.get(pk=draft.pk)
    assert (saved.shadow, saved.judge_share, saved.judge_lane, saved.stop_metric, saved.stop_threshold) == (
        True, 0.25, "qwen", "win_rate", 0.6)
    event = AuditEvent.objects.filter(action="router.shadow").latest("id")
    assert event.diff["judge_share"] == [None, 0.25] and event.diff["stop_metric"] == [None, "win_rate"]

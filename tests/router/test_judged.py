"""Judged comparison of a shadow draft: through the real gateway in front of two sparksim
lanes, the draft's lane answers after the client had its answer and a judge lane grades the
two answers blind; a day's token budget stops it before any call that could pass it; the
key's limits never see these tokens; keys that do not store prompts are never judged."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aredis
from django.conf import settings as django_settings
from django.core.exceptions import ValidationError
from django.test import Client

from gateway.judge import budget_take, parse_verdict
from gateway.models import JudgedComparison, RequestLog
from routing.models import RouterVersion
from routing.services import router_version_create_draft, router_version_set_shadow, router_version_update
from routing.shadow import judge_tokens_today
from tests.conftest import wait_for
from tests.gateway.conftest import create_key, engine_received, run_async
from tests.router.test_gateway_auto import DEEP, ask, user
from tests.router.test_gateway_auto import auto_gateway as auto_gateway  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db(transaction=True)


def judged_shadow(owner, *, tokens: int = 50_000, share: float = 1.0) -> RouterVersion:
    """A draft that sends long reasoning to qwen (the published v1 sends it to deepseek), in
    shadow on every request, judged by qwen."""
    draft = router_version_create_draft(actor=owner, source=RouterVersion.objects.get(number=1))
    router_version_update(actor=owner, version=draft, data={"label_lanes": {**draft.label_lanes, "long_reasoning": "qwen"}})
    router_version_set_shadow(actor=owner, version=draft, rules={
        "judge_share": share, "judge_lane": "qwen", "judge_daily_tokens": tokens})
    return draft


@pytest.mark.parametrize(("reply", "verdict"), [
    ('{"winner": "A", "reason": "correct"}', "A"),
    ('Sure! Here is my verdict:\n```json\n{"winner": "b", "reason": "B is complete"}\n```', "B"),
    ('{"winner": "tie"}', "tie"),
    ("winner: B (A misses the edge case)", "B"),
    ('{"winner": "A", "reason": "unterminated', "A"),
    ("  A. ", "A"),
    ("I cannot decide between them.", None),
    ('{"winner": "C"}', None),
])
def test_the_verdict_is_read_robustly(reply, verdict):
    assert parse_verdict(reply) == verdict


def test_the_budget_is_taken_atomically_and_never_passed():
    async def takes() -> list[bool]:
        client = aredis.Redis.from_url(django_settings.REDIS_URL)
        try:
            return list(await asyncio.gather(*(budget_take(client, 30, 500) for _ in range(50))))
        finally:
            await client.aclose()

    granted = run_async(takes)
    assert sum(granted) == 16 and judge_tokens_today() == 480


def test_a_judged_comparison_grades_the_drafts_answer_blind_off_the_clients_path(auto_gateway, key_owner, settings):
    settings.ROUTER_SHADOW_SHARE = 1.0
    settings.ROUTER_VERSION_CHECK_S = 0
    draft = judged_shadow(key_owner)
    secret, key_id = create_key(key_owner, name="storing", log_prompts=True)
    qwen = auto_gateway.engines["qwen"]  # type: ignore[attr-defined]
    answer = ask(auto_gateway, user(DEEP), secret=secret)
    assert answer.status_code == 200 and answer.headers["x-spark-lane"] == "deepseek"  # the client's answer
    row = wait_for(lambda: JudgedComparison.objects.filter(request_id=answer.headers["x-request-id"]).first(),
                   what="the judged comparison")
    assert (row.router_version, row.published_lane, row.draft_lane, row.judge_lane) == (draft.number, "deepseek", "qwen", "qwen")
    # sparksim's structured output names the first enum value, "A": the position decides.
    assert row.verdict == ("draft" if row.draft_first else "published"), row.reason
    assert row.answer_tokens > 0 and row.judge_tokens > 0
    assert judge_tokens_today() == row.answer_tokens + row.judge_tokens
    draft_call, judge_call = engine_received(qwen)[-2:]
    assert draft_call["messages"][-1]["content"] == DEEP and draft_call["stream"] is False
    assert judge_call["response_format"]["type"] == "json_schema"
    shown = judge_call["messages"][1]["content"]
    assert DEEP in shown and "## Answer A" in shown and "## Answer B" in shown
    assert "deepseek" not in shown and "qwen" not in shown  # blind: no lane named
    # The key's own log has its one request; the comparison's calls never went through its limits.
    wait_for(lambda: RequestLog.objects.filter(key_id=key_id).exists(), what="the key's log row")
    assert RequestLog.objects.filter(key_id=key_id).count() == 1
    page = auto_gateway_page(key_owner)
    assert 'id="judged"' in page and ("1 win" in page or "1 loss" in page) and 'id="judge-cost"' in page


def auto_gateway_page(owner) -> str:
    client = Client()
    client.force_login(owner)
    return client.get("/routing/shadow/").content.decode()


def test_a_key_that_stores_no_prompt_is_never_judged(auto_gateway, key_owner, settings):
    settings.ROUTER_SHADOW_SHARE = 1.0
    judged_shadow(key_owner)
    before = len(engine_received(auto_gateway.engines["qwen"]))  # type: ignore[attr-defined]
    answer = ask(auto_gateway, user(DEEP))  # the fixture's key stores no prompt
    assert answer.status_code == 200 and answer.headers["x-spark-lane"] == "deepseek"
    wait_for(lambda: RequestLog.objects.filter(request_id=answer.headers["x-request-id"]).exists(), what="the log row")
    assert RequestLog.objects.get(request_id=answer.headers["x-request-id"]).shadow_lane == "qwen"  # it was sampled
    assert not JudgedComparison.objects.exists()
    assert len(engine_received(auto_gateway.engines["qwen"])) == before  # type: ignore[attr-defined]


@pytest.mark.parametrize("tokens", [1, 900])
def test_the_judge_never_runs_past_its_daily_budget(auto_gateway, key_owner, settings, tokens):
    """1 token: not even the draft answers. 900: the draft's answer fits its worst case, the
    judge's (a longer prompt) does not — so the judge lane is never asked."""
    settings.ROUTER_SHADOW_SHARE = 1.0
    judged_shadow(key_owner, tokens=tokens)
    secret, _ = create_key(key_owner, name="storing", log_prompts=True)
    qwen = auto_gateway.engines["qwen"]  # type: ignore[attr-defined]
    before = len(engine_received(qwen))
    answer = ask(auto_gateway, user(DEEP), secret=secret)
    assert answer.status_code == 200
    row = wait_for(lambda: JudgedComparison.objects.filter(request_id=answer.headers["x-request-id"]).first(),
                   what="the judged comparison")
    assert row.verdict == "budget" and row.judge_tokens == 0
    sent = engine_received(qwen)[before:]
    assert not any("response_format" in body for body in sent)  # the judge was never asked
    assert len(sent) == (0 if tokens == 1 else 1)
    assert judge_tokens_today() == row.answer_tokens <= tokens


def test_shadow_rules_are_checked_and_name_the_field(auto_gateway, key_owner):
    draft = router_version_create_draft(actor=key_owner, source=RouterVersion.objects.get(number=1))
    for rules, field in (({"judge_share": 1.5}, "judge_share"), ({"judge_share": 0.5, "judge_lane": ""}, "judge_lane"),
                         ({"judge_lane": "nope", "judge_share": 0.5}, "judge_lane"), ({"stop_metric": "magic"}, "stop_metric"),
                         ({"stop_confidence": "nan"}, "stop_confidence"), ({"judge_daily_tokens": 0}, "judge_daily_tokens")):
        with pytest.raises(ValidationError) as caught:
            router_version_set_shadow(actor=key_owner, version=draft, rules=rules)
        assert field in caught.value.message_dict, rules
    assert not RouterVersion.objects.get(pk=draft.pk).shadow  # nothing saved



def test_judged_comparisons_are_kept_as_long_as_the_request_log(db, settings):
    from datetime import timedelta

    from django.utils import timezone

    from gateway.services import request_outcome_purge

    now = timezone.now()
    row = {"request_id": "r", "router_version": 2, "published_lane": "deepseek", "draft_lane": "qwen",
           "judge_lane": "qwen", "verdict": "tie"}
    JudgedComparison.objects.create(**row, created_at=now - timedelta(days=settings.GATEWAY_LOG_RETENTION_DAYS, hours=1))
    kept = JudgedComparison.objects.create(**row, created_at=now - timedelta(days=1))
    assert request_outcome_purge(now=now) == 1
    assert list(JudgedComparison.objects.values_list("pk", flat=True)) == [kept.pk]

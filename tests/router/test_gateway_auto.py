"""model="auto" through the real gateway (uvicorn, the ASGI app) in front of two sparksim
engines: the published version decides, a publish is seen without a restart, the key's
lanes are respected, a conversation keeps its lane, a long prompt goes where it fits."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import httpx
import pytest

from gateway.models import RequestLog
from routing.models import RouterVersion
from routing.services import (
    router_version_create_draft,
    router_version_publish,
    router_version_set_shadow,
    router_version_update,
    starter_load,
)
from sparksim.standalone import EngineHandle
from tests.conftest import SIM_QWEN, wait_for
from tests.gateway.conftest import Gateway, create_key, engine_received, make_lane

DEEP = "Prove that there are infinitely many primes of the form 4k+3."
SHORT = "What port does PostgreSQL listen on by default?"


@pytest.fixture
def auto_gateway(asgi_server, key_owner, engine_factory: Callable[..., EngineHandle], settings) -> Gateway:
    qwen = engine_factory(SIM_QWEN, "--served-model-name", "qwen-test", time_scale=0.001)
    deepseek = engine_factory(SIM_QWEN, "--served-model-name", "deepseek-test", time_scale=0.001)
    make_lane("qwen", qwen.port, served="qwen-test", max_model_len=32768)
    make_lane("deepseek", deepseek.port, served="deepseek-test", max_model_len=131072)
    starter_load(actor=key_owner)
    secret, key_id = create_key(key_owner)
    gateway = Gateway(server=asgi_server, secret=secret, key_id=key_id)
    gateway.engines = {"qwen": qwen, "deepseek": deepseek}  # type: ignore[attr-defined]
    return gateway


def ask(gateway: Gateway, *messages: dict[str, str], secret: str | None = None, **extra: Any) -> httpx.Response:
    body = {"model": "auto", "messages": list(messages), "max_tokens": 8, **extra}
    return httpx.post(f"{gateway.base_url}/chat/completions", json=body, headers=gateway.headers(secret), timeout=30)


def user(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}


def test_auto_follows_the_published_version_and_says_why(auto_gateway):
    deep = ask(auto_gateway, user(DEEP))
    assert deep.status_code == 200, deep.text
    assert deep.headers["x-spark-lane"] == "deepseek"
    assert deep.headers["x-spark-route-reason"] == "router"
    assert deep.headers["x-spark-route-label"] == "long_reasoning"
    assert deep.headers["x-spark-router-version"] == "1"
    assert float(deep.headers["x-spark-route-score"]) >= RouterVersion.objects.get(number=1).threshold
    short = ask(auto_gateway, user(SHORT))
    assert short.headers["x-spark-lane"] == "qwen" and short.headers["x-spark-route-label"] == "short_factual"
    row = wait_for(lambda: RequestLog.objects.filter(request_id=deep.headers["x-request-id"]).first(), what="the log row")
    assert (row.lane, row.route_reason, row.route_label, row.router_version) == ("deepseek", "router", "long_reasoning", 1)
    assert row.route_prototype and row.route_score is not None


def test_a_publish_and_a_rollback_reach_the_running_gateway_without_restart(auto_gateway, key_owner, settings):
    settings.ROUTER_AFFINITY_MESSAGES = 0
    assert ask(auto_gateway, user(DEEP)).headers["x-spark-lane"] == "deepseek"
    draft = router_version_create_draft(actor=key_owner, source=RouterVersion.objects.get(number=1))
    router_version_update(actor=key_owner, version=draft, data={"label_lanes": {"long_reasoning": "qwen"}})
    router_version_publish(actor=key_owner, version=draft)
    moved = wait_for(lambda: (r := ask(auto_gateway, user(DEEP))).headers["x-spark-router-version"] == "2" and r,
                     timeout=30, what="the gateway to use v2")
    assert moved.headers["x-spark-lane"] == "qwen" and moved.headers["x-spark-route-label"] == "long_reasoning"
    router_version_publish(actor=key_owner, version=RouterVersion.objects.get(number=1))
    back = wait_for(lambda: (r := ask(auto_gateway, user(DEEP))).headers["x-spark-router-version"] == "1" and r,
                    timeout=30, what="the gateway to roll back to v1")
    assert back.headers["x-spark-lane"] == "deepseek"


def test_auto_never_picks_a_lane_the_key_may_not_use(auto_gateway, key_owner):
    secret, _ = create_key(key_owner, name="qwen-only", allowed_lanes=["qwen"])
    before = len(engine_received(auto_gateway.engines["deepseek"]))  # type: ignore[attr-defined]
    for prompt in (DEEP, "Write a 3,000-word design doc for a job scheduler.", "Refactor the whole billing service."):
        answer = ask(auto_gateway, user(prompt), secret=secret)
        assert answer.status_code == 200 and answer.headers["x-spark-lane"] == "qwen", answer.headers
        assert answer.headers["x-spark-route-reason"] in ("router", "default", "fallback")
    assert len(engine_received(auto_gateway.engines["deepseek"])) == before  # type: ignore[attr-defined]


def test_a_conversation_keeps_its_lane(auto_gateway):
    system = {"role": "system", "content": "You are the refactor agent."}
    first = ask(auto_gateway, system, user(DEEP))
    assert first.headers["x-spark-lane"] == "deepseek"
    later = ask(auto_gateway, system, user(DEEP), {"role": "assistant", "content": "Suppose finitely many…"}, user(SHORT))
    assert later.headers["x-spark-lane"] == "deepseek"
    assert later.headers["x-spark-route-affinity"] == "conversation"
    fresh = ask(auto_gateway, {"role": "system", "content": "You are the docs agent."}, user(SHORT))
    assert fresh.headers["x-spark-lane"] == "qwen" and "x-spark-route-affinity" not in fresh.headers


def test_a_prompt_too_long_for_the_chosen_lane_goes_to_one_that_fits(auto_gateway, key_owner, settings):
    settings.ROUTER_VERSION_CHECK_S = 0
    everything_on_qwen = router_version_create_draft(actor=key_owner, source=RouterVersion.objects.get(number=1))
    labels = set(everything_on_qwen.label_lanes)
    router_version_update(actor=key_owner, version=everything_on_qwen, data={"label_lanes": dict.fromkeys(labels, "qwen")})
    router_version_publish(actor=key_owner, version=everything_on_qwen)
    assert ask(auto_gateway, user(DEEP)).headers["x-spark-lane"] == "qwen"
    pasted = "node spark3 reported ok; " * 1400  # ~35,000 bytes: more than qwen's 32,768 tokens can be
    answer = ask(auto_gateway, user(pasted + " Which node reported?"))
    assert answer.status_code == 200
    assert answer.headers["x-spark-lane"] == "deepseek" and answer.headers["x-spark-route-reason"] == "context"


def everything_on_qwen(key_owner) -> None:
    draft = router_version_create_draft(actor=key_owner, source=RouterVersion.objects.get(number=1))
    router_version_update(actor=key_owner, version=draft, data={"label_lanes": dict.fromkeys(draft.label_lanes, "qwen")})
    router_version_publish(actor=key_owner, version=draft)


def test_a_prompt_whose_bytes_exceed_every_lane_is_counted_on_the_roomiest(auto_gateway, key_owner, settings):
    settings.ROUTER_VERSION_CHECK_S = 0
    everything_on_qwen(key_owner)
    pasted = "node spark3 reported ok; " * 6000  # 150,000 bytes: over both limits by the byte bound, 36,000 tokens
    answer = ask(auto_gateway, user(pasted + " Which node reported?"))
    assert answer.status_code == 200, answer.text  # before: refused with qwen's 32,768 tokens
    assert answer.headers["x-spark-lane"] == "deepseek" and answer.headers["x-spark-route-reason"] == "context"


def test_a_prompt_too_long_for_every_lane_is_refused_naming_each_lanes_limit(auto_gateway, key_owner, settings):
    settings.ROUTER_VERSION_CHECK_S = 0
    everything_on_qwen(key_owner)
    before = {name: len(engine_received(engine)) for name, engine in auto_gateway.engines.items()}  # type: ignore[attr-defined]
    pasted = "node spark3 reported ok; " * 25000  # 150,000 tokens (6 a repetition): no lane holds it
    answer = ask(auto_gateway, user(pasted))
    assert answer.status_code == 400, answer.text
    error = answer.json()["error"]
    assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
    assert error["message"].startswith("No lane this key may use can hold this request")
    assert "qwen 32768, deepseek 131072 tokens" in error["message"]
    after = {name: len(engine_received(engine)) for name, engine in auto_gateway.engines.items()}  # type: ignore[attr-defined]
    assert after == before  # refused before sending (the roomiest lane's /tokenize is not a generation)


def test_a_named_lane_keeps_its_own_limit_in_the_refusal(auto_gateway):
    pasted = "node spark3 reported ok; " * 6000
    body = {"model": "qwen", "messages": [user(pasted)], "max_tokens": 8}
    answer = httpx.post(f"{auto_gateway.base_url}/chat/completions", json=body, headers=auto_gateway.headers(), timeout=30)
    assert answer.status_code == 400
    assert answer.json()["error"]["message"].startswith("This model's maximum context length is 32768 tokens")


def test_a_shadow_draft_decides_beside_the_published_version(auto_gateway, key_owner, settings):
    settings.ROUTER_SHADOW_SHARE = 1.0
    draft = router_version_create_draft(actor=key_owner, source=RouterVersion.objects.get(number=1))
    router_version_update(actor=key_owner, version=draft, data={"label_lanes": {"long_reasoning": "qwen"}})
    router_version_set_shadow(actor=key_owner, version=draft)
    answer = wait_for(lambda: (r := ask(auto_gateway, user(DEEP + " Carefully."))) and r.headers["x-spark-lane"] == "deepseek"
                      and RequestLog.objects.filter(shadow_version=draft.number).exists() and r,
                      timeout=30, what="a shadow decision in the log")
    row = RequestLog.objects.filter(shadow_version=draft.number).first()
    assert row is not None and (row.lane, row.shadow_lane, row.shadow_label) == ("deepseek", "qwen", "long_reasoning")
    assert answer.headers["x-spark-lane"] == "deepseek"  # the client's answer follows the published version


def test_a_missing_model_directory_turns_auto_off_with_the_reason_and_lanes_keep_serving(auto_gateway, settings, tmp_path):
    settings.ROUTER_MODEL_DIR = tmp_path / "no-model-here"
    refused = ask(auto_gateway, user(SHORT))
    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["code"] == "router_unavailable" and "no-model-here does not exist" in error["message"]
    explicit = httpx.post(f"{auto_gateway.base_url}/chat/completions", headers=auto_gateway.headers(), timeout=30,
                          json={"model": "qwen", "messages": [user(SHORT)], "max_tokens": 4})
    assert explicit.status_code == 200 and explicit.headers["x-spark-lane"] == "qwen"


def test_with_no_model_directory_and_nothing_published_auto_takes_the_default_lane(auto_gateway, settings, tmp_path):
    RouterVersion.objects.all().delete()
    settings.ROUTER_MODEL_DIR = tmp_path / "no-model-here"
    answer = ask(auto_gateway, user(SHORT))
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-spark-route-reason"] == "default"

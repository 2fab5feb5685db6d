"""The simulated engine answers bad input like vLLM (400, vLLM's error shape) before it
plans or allocates anything, and what one request may allocate is bounded."""

import tracemalloc
from pathlib import Path
from typing import Any

import httpx
import pytest

from sparksim.engine.planning import plan_chat
from sparksim.engine.server import METRICS_CONTENT_TYPE
from sparksim.engine.validation import validate_chat
from sparksim.standalone import EngineHandle
from sparksim.textgen import CorpusTokens

MESSAGES = [{"role": "user", "content": "Hello there"}]

# (case, fields added to a valid chat body, vLLM error type, a phrase of vLLM's message)
BAD_CHAT: list[tuple[str, dict[str, Any], str, str]] = [
    ("n huge", {"n": 100_000, "max_tokens": 2}, "BadRequestError", "n must be at most max_num_seqs"),
    ("n zero", {"n": 0}, "BadRequestError", "n must be at least 1"),
    ("n a string", {"n": "two"}, "Bad Request", "Input should be a valid integer"),
    ("temperature negative", {"temperature": -0.1}, "BadRequestError", "temperature must be non-negative"),
    ("temperature a string", {"temperature": "hot"}, "Bad Request", "Input should be a valid number"),
    ("top_p zero", {"top_p": 0}, "BadRequestError", "top_p must be in (0, 1]"),
    ("top_p above one", {"top_p": 1.5}, "BadRequestError", "top_p must be in (0, 1]"),
    ("top_k below -1", {"top_k": -5}, "BadRequestError", "top_k must be 0 (disable), or at least 1"),
    ("min_p above one", {"min_p": 2}, "BadRequestError", "min_p must be in [0, 1]"),
    ("presence_penalty", {"presence_penalty": 3}, "BadRequestError", "presence_penalty must be in [-2, 2]"),
    ("repetition_penalty zero", {"repetition_penalty": 0}, "BadRequestError", "repetition_penalty must be greater"),
    ("max_tokens zero", {"max_tokens": 0}, "BadRequestError", "max_tokens must be at least 1"),
    ("max_tokens beyond the context", {"max_tokens": 10_000_000}, "BadRequestError",
     "maximum context length is"),
    ("min_tokens above max_tokens", {"max_tokens": 4, "min_tokens": 9}, "BadRequestError",
     "min_tokens must be less than or equal to max_tokens=4"),
    ("tools true", {"tools": True}, "Bad Request", "Input should be a valid list"),
    ("tools of numbers", {"tools": [1]}, "Bad Request", "Input should be a valid dictionary"),
    ("a tool without function", {"tools": [{"type": "function"}]}, "Bad Request",
     "Input should be a valid dictionary"),
    ("tool_choice function a string", {"tools": [{"type": "function", "function": {"name": "f"}}],
                                       "tool_choice": {"type": "function", "function": "f"}}, "Bad Request",
     "Input should be a valid dictionary"),
    ("messages of numbers", {"messages": [1, 2]}, "Bad Request", "Input should be a valid dictionary"),
    ("stream a number", {"stream": 1}, "Bad Request", "Input should be a valid boolean"),
    ("a tool call function a string", {"messages": [{"role": "assistant", "tool_calls": [{"function": "x"}]},
                                                     *MESSAGES]}, "Bad Request", "Input should be a valid dictionary"),
    ("top_logprobs above --max-logprobs", {"logprobs": True, "top_logprobs": 21}, "BadRequestError",
     "Requested sample logprobs of 21, which is greater than max allowed: 20"),
    ("top_logprobs without logprobs", {"top_logprobs": 3}, "BadRequestError",
     "when using `top_logprobs`, `logprobs` must be set to true"),
    ("top_logprobs negative", {"logprobs": True, "top_logprobs": -1}, "BadRequestError", "must be a positive value"),
    ("logit_bias a list", {"logit_bias": [1, 2]}, "Bad Request", "Input should be a valid dictionary"),
]


@pytest.fixture
def qwen(engine_factory: Any) -> EngineHandle:
    from tests.sparksim.conftest import QWEN

    handle: EngineHandle = engine_factory(QWEN, "--max-model-len", "32768", "--max-num-seqs", "64")
    return handle


def rss_kib(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise AssertionError("no VmRSS")


def test_bad_requests_get_vllms_400_without_being_scheduled(qwen: EngineHandle) -> None:
    with httpx.Client(base_url=qwen.url, timeout=10) as client:
        before = rss_kib(qwen.process.pid)
        for case, fields, error_type, phrase in BAD_CHAT:
            response = client.post("/v1/chat/completions", json={"model": "Qwen/Qwen3.8-27B-FP8",
                                                                 "messages": MESSAGES, **fields})
            assert response.status_code == 400, (case, response.text)
            error = response.json()["error"]
            assert set(error) == {"message", "type", "param", "code"} and error["code"] == 400, case
            assert error["type"] == error_type and phrase in error["message"], (case, error)
        text = client.post("/v1/completions", json={"prompt": "x", "n": 100_000})
        assert text.status_code == 400 and "n must be at most" in text.json()["error"]["message"]
        logprobs = client.post("/v1/completions", json={"prompt": "x", "logprobs": 21})
        assert logprobs.status_code == 400 and "greater than max allowed: 20" in logprobs.json()["error"]["message"]
        state = client.get("/_sim/state").json()
        assert state["running"] == 0 and state["waiting"] == 0 and state["kv_used"] == 0
        # Nothing of the refused requests stayed: the process did not grow by more than noise.
        assert rss_kib(qwen.process.pid) - before < 20 * 1024
        answer = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 4})
        assert answer.status_code == 200


def test_metrics_are_served_with_the_prometheus_text_content_type(qwen: EngineHandle) -> None:
    response = httpx.get(f"{qwen.url}/metrics")
    assert response.headers["content-type"] == METRICS_CONTENT_TYPE == "text/plain; version=0.0.4; charset=utf-8"
    assert "vllm:num_requests_running" in response.text


def test_validation_happens_before_anything_is_planned() -> None:
    with pytest.raises(Exception) as caught:
        validate_chat({"messages": MESSAGES, "n": 100_000}, max_num_seqs=256)
    assert "n must be at most" in str(caught.value)


def test_a_choice_of_a_whole_context_allocates_no_token_list() -> None:
    """ignore_eos up to a 1M-token context on every one of 256 sequences: the plan holds
    an offset and a length per choice, not a million strings each."""
    body = {"messages": MESSAGES, "n": 256, "ignore_eos": True, "max_tokens": 1_048_000}
    tracemalloc.start()
    try:
        plan = plan_chat(body, ["m"], 1_048_576, 151_936)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(plan.plans) == 256 and all(len(choice.tokens) == 1_048_000 for choice in plan.plans)
    assert all(isinstance(choice.tokens, CorpusTokens) for choice in plan.plans)
    assert peak < 2 * 1024 * 1024
    tokens = plan.plans[0].tokens
    assert tokens[0] == tokens[-1_048_000] and tokens[5:8] == [tokens[5], tokens[6], tokens[7]]


# (case, /tokenize body, pydantic's wording, the field it names)
BAD_TOKENIZE: list[tuple[str, dict[str, Any], str, str]] = [
    ("messages a number", {"messages": 5}, "Input should be a valid list", "'messages'"),
    ("messages a string", {"messages": "hi"}, "Input should be a valid list", "'messages'"),
    ("messages of numbers", {"messages": [1, 2]}, "Input should be a valid dictionary", "'messages', '0'"),
    ("messages null", {"messages": None}, "Input should be a valid list", "'messages'"),
    ("tools true", {"messages": MESSAGES, "tools": True}, "Input should be a valid list", "'tools'"),
    ("tools of numbers", {"messages": MESSAGES, "tools": [1]}, "Input should be a valid dictionary", "'tools', '0'"),
    ("prompt a list", {"prompt": [1, 2]}, "Input should be a valid string", "'prompt'"),
    ("add_special_tokens a string", {"prompt": "hi", "add_special_tokens": "x"}, "Input should be a valid boolean",
     "'add_special_tokens'"),
]

# (case, /_sim/faults body, the switch named); each refused before any switch changes.
BAD_FAULTS: list[tuple[str, dict[str, Any], str]] = [
    ("latency a word", {"latency_s": "slow"}, "latency_s"),
    ("latency negative", {"latency_s": -1}, "latency_s"),
    ("latency 1e308", {"latency_s": 1e308}, "latency_s"),
    ("refuse a word", {"refuse_connections_s": "abc"}, "refuse_connections_s"),
    ("die after a word", {"die_after_requests": "x"}, "die_after_requests"),
    ("die mid-stream negative", {"die_mid_stream_after_tokens": -2}, "die_mid_stream_after_tokens"),
    ("hold a word", {"hold": "no"}, "hold"),
    ("prefill factor zero", {"slow_prefill_factor": 0}, "slow_prefill_factor"),
    ("unavailable a number", {"unavailable": 1}, "unavailable"),
    ("valid then invalid", {"hold": True, "latency_s": "slow"}, "latency_s"),
]


def test_tokenize_answers_wrong_types_with_vllms_400(qwen: EngineHandle) -> None:
    with httpx.Client(base_url=qwen.url, timeout=10) as client:
        for case, body, phrase, loc in BAD_TOKENIZE:
            response = client.post("/tokenize", json=body)
            assert response.status_code == 400, (case, response.text)
            error = response.json()["error"]
            assert error["type"] == "Bad Request" and phrase in error["message"] and loc in error["message"], (case, error)
        assert client.post("/tokenize", json={"messages": MESSAGES}).json()["count"] > 0


def test_the_fault_switches_refuse_a_bad_value_naming_it_and_change_nothing(qwen: EngineHandle) -> None:
    with httpx.Client(base_url=qwen.url, timeout=10) as client:
        before = client.get("/_sim/faults").json()
        for case, body, name in BAD_FAULTS:
            response = client.post("/_sim/faults", json=body)
            assert response.status_code == 400, (case, response.text)
            assert response.json()["error"]["param"] == name and name in response.json()["error"]["message"], case
            assert client.get("/_sim/faults").json() == before, case
        not_json = client.post("/_sim/faults", content=b"{hold: true", headers={"content-type": "application/json"})
        assert not_json.status_code == 400 and "JSON decode error" in not_json.json()["error"]["message"]
        # The engine still answers, with no latency or hold left behind.
        answer = client.post("/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 2})
        assert answer.status_code == 200

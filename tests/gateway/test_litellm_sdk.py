"""LiteLLM's SDK, pointed at the gateway as an OpenAI-compatible provider."""

from __future__ import annotations

import os
from typing import Any

import httpx
import pytest

from sparksim.standalone import EngineHandle
from tests.gateway.conftest import SIM_SERVED, Gateway, engine_completed, engine_received, set_engine_faults

# LiteLLM fetches its model price map from the internet at import unless told not to.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("LITELLM_TELEMETRY", "False")


@pytest.fixture
def litellm() -> Any:
    import litellm as module

    module.telemetry = False
    return module


def test_litellm_completes_and_streams_through_the_gateway(
    gateway: Gateway, qwen_engine: EngineHandle, litellm: Any
) -> None:
    messages = [{"role": "user", "content": "hi"}]
    expected = httpx.post(f"{qwen_engine.url}/v1/chat/completions",
                          json={"model": SIM_SERVED, "max_tokens": 16, "messages": messages}).json()
    answer = litellm.completion(model="openai/qwen", api_base=gateway.base_url, api_key=gateway.secret,
                                max_tokens=16, messages=messages)
    assert answer.choices[0].message.content == expected["choices"][0]["message"]["content"]
    assert answer.usage.prompt_tokens == expected["usage"]["prompt_tokens"]
    chunks = list(litellm.completion(model="openai/auto", api_base=gateway.base_url, api_key=gateway.secret,
                                     max_tokens=16, stream=True, messages=messages))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == expected["choices"][0]["message"]["content"]
    assert engine_completed(qwen_engine) == 3  # the direct call and one each through the gateway


def test_litellm_gets_an_openai_shaped_error_without_a_second_upstream_call(
    gateway: Gateway, qwen_engine: EngineHandle, litellm: Any
) -> None:
    set_engine_faults(qwen_engine, die=True)  # a dead vLLM answers 500
    with pytest.raises(litellm.exceptions.BadGatewayError):
        litellm.completion(model="openai/qwen", api_base=gateway.base_url, api_key=gateway.secret,
                           messages=[{"role": "user", "content": "hi"}], num_retries=0)
    with pytest.raises(litellm.exceptions.AuthenticationError):
        litellm.completion(model="openai/qwen", api_base=gateway.base_url, api_key="sk-wrong",
                           messages=[{"role": "user", "content": "hi"}])
    assert len(engine_received(qwen_engine)) == 1

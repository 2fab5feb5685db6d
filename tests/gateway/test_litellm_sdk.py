"""LiteLLM's SDK, pointed at the gateway as an OpenAI-compatible provider."""

from __future__ import annotations

import os
from typing import Any

import pytest

from tests.gateway.conftest import Gateway
from tests.gateway.upstreams import CountingUpstream

# LiteLLM fetches its model price map from the internet at import unless told not to.
os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
os.environ.setdefault("LITELLM_TELEMETRY", "False")


@pytest.fixture
def litellm() -> Any:
    import litellm as module

    module.telemetry = False
    return module


def test_litellm_completes_and_streams_through_the_gateway(
    gateway: Gateway, upstream: CountingUpstream, litellm: Any
) -> None:
    answer = litellm.completion(model="openai/qwen", api_base=gateway.base_url, api_key=gateway.secret,
                                messages=[{"role": "user", "content": "hi"}])
    assert answer.choices[0].message.content == "Hello from qwen-test choice 0."
    assert answer.usage.prompt_tokens == 11
    chunks = list(litellm.completion(model="openai/auto", api_base=gateway.base_url, api_key=gateway.secret,
                                     stream=True, messages=[{"role": "user", "content": "hi"}]))
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text == "Hello from qwen-test choice 0. "
    assert upstream.completions == 2


def test_litellm_gets_an_openai_shaped_error_without_a_second_upstream_call(
    gateway: Gateway, upstream: CountingUpstream, litellm: Any
) -> None:
    upstream.mode = "500"
    with pytest.raises(litellm.exceptions.BadGatewayError):
        litellm.completion(model="openai/qwen", api_base=gateway.base_url, api_key=gateway.secret,
                           messages=[{"role": "user", "content": "hi"}], num_retries=0)
    with pytest.raises(litellm.exceptions.AuthenticationError):
        litellm.completion(model="openai/qwen", api_base=gateway.base_url, api_key="sk-wrong",
                           messages=[{"role": "user", "content": "hi"}])
    assert upstream.completions == 1

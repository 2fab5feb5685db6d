"""The guardian's I/O edge: each replica's /metrics and the idle replica's canary, all at
once, each bounded by its own timeout; a failure comes back as text, never as an exception."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx

from lanes.liveness import CANARY_PROMPT, PROGRESS_COUNTERS, RUNNING_GAUGE, WAITING_GAUGE
from metrics.parsing import parse_vllm_metrics


@dataclass(frozen=True)
class Reading:
    values: dict[str, float] | None  # progress counters and the running/waiting gauges
    error: str = ""


@dataclass(frozen=True)
class CanaryResult:
    ok: bool
    detail: str
    seconds: float


async def read_progress(client: httpx.AsyncClient, base_url: str, timeout_s: float) -> Reading:
    try:
        response = await asyncio.wait_for(client.get(f"{base_url}/metrics"), timeout_s)
        response.raise_for_status()
        reading = parse_vllm_metrics(response.text, at=time.time())
    except (TimeoutError, httpx.HTTPError, OSError, ValueError) as exc:
        return Reading(None, f"{base_url}/metrics: {type(exc).__name__}")
    values = {name: reading.counters.get(name, 0.0) for name in PROGRESS_COUNTERS}
    values[RUNNING_GAUGE] = reading.gauges.get(RUNNING_GAUGE, 0.0)
    values[WAITING_GAUGE] = reading.gauges.get(WAITING_GAUGE, 0.0)
    return Reading(values)


async def send_canary(client: httpx.AsyncClient, base_url: str, model: str, timeout_s: float) -> CanaryResult:
    """One real token, straight to the engine (not through the gateway: no usage, no request log)."""
    started = time.monotonic()
    body = {"model": model, "prompt": CANARY_PROMPT, "max_tokens": 1, "temperature": 0}
    try:
        response = await asyncio.wait_for(client.post(f"{base_url}/v1/completions", json=body), timeout_s)
    except (TimeoutError, httpx.TimeoutException):
        return CanaryResult(False, f"no token within {timeout_s:g} s", time.monotonic() - started)
    except (httpx.HTTPError, OSError) as exc:
        return CanaryResult(False, f"{type(exc).__name__}", time.monotonic() - started)
    seconds = time.monotonic() - started
    if response.status_code != 200:
        return CanaryResult(False, f"answered {response.status_code}", seconds)
    try:
        tokens = int(response.json()["usage"]["completion_tokens"])
    except (ValueError, KeyError, TypeError):
        tokens = 0
    if tokens < 1:
        return CanaryResult(False, "answered without a token", seconds)
    return CanaryResult(True, f"1 token in {seconds * 1000:.0f} ms", seconds)

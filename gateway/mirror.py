"""Mirrored traffic: a share of requests is replayed, after the client has its answer, to
an external OpenAI-compatible endpoint, and the two answers are compared (seed 000: a
silent second router on 1% of traffic, with divergence logs). It runs in a background
task with its own timeout: it can neither delay nor fail the client's request.

A large body (gateway.large) is mirrored like a small one, with the same changes
(the mirror model, not streamed, no stream_options) made in its raw bytes and sent in
slices (LargeBody.mirror) — never parsed in the web process. Its memory is held until the
replay ends (up to portal.tuning.GATEWAY_MIRROR_TIMEOUT_S), so at most LARGE_MIRRORS_MAX large
bodies are held for replays at once per process; a large request chosen for mirroring
beyond that is not mirrored (counted in `large_mirrors_skipped`)."""

from __future__ import annotations

import logging
import math
import re
import threading
import time
from collections import Counter
from typing import Any

import httpx
import orjson
from django.conf import settings

from core.db import db_call
from gateway.body import StreamedBody
from gateway.models import MirrorSample
from gateway.upstream import body_arguments
from gateway.wire import completion_text, sse_events, usage_from

log = logging.getLogger(__name__)
WORD = re.compile(r"\w+", re.UNICODE)


def mirror_enabled() -> bool:
    return bool(settings.GATEWAY_MIRROR_BASE_URL and settings.GATEWAY_MIRROR_MODEL and settings.GATEWAY_MIRROR_SHARE > 0)


LARGE_MIRRORS_MAX = 2  # large bodies held for mirror replays at once, per process


class LargeMirrors:
    """The bound on large bodies held for mirror replays (a slot is taken when the request
    is chosen, given back when its replay ends or is not made)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # tests run several event loops (servers) in one process
        self.held = 0
        self.skipped = 0

    def take(self) -> bool:
        with self._lock:
            if self.held >= LARGE_MIRRORS_MAX:
                self.skipped += 1
                return False
            self.held += 1
            return True

    def give_back(self) -> None:
        with self._lock:
            self.held -= 1


LARGE_MIRRORS = LargeMirrors()


def mirror_body(body: dict[str, Any]) -> bytes:
    """What the mirror endpoint is sent for a (small) body: the mirror model, not streamed."""
    external = {**body, "model": settings.GATEWAY_MIRROR_MODEL, "stream": False}
    external.pop("stream_options", None)
    return orjson.dumps(external)


def divergence(first: str, second: str) -> float:
    """1 − cosine similarity of the two answers' word counts: 0 = the same words in the
    same proportions, 1 = no word in common."""
    a, b = Counter(WORD.findall(first.lower())), Counter(WORD.findall(second.lower()))
    if not a and not b:
        return 0.0
    if not a or not b:
        return 1.0
    dot = sum(count * b[word] for word, count in a.items())
    norm = math.sqrt(sum(c * c for c in a.values())) * math.sqrt(sum(c * c for c in b.values()))
    return round(max(0.0, 1.0 - dot / norm), 4)


def text_of_stream(sse: bytes) -> str:
    """The answer text carried by an SSE stream (choices' content or text deltas)."""
    parts: list[str] = []
    for event in sse_events(sse):
        event = event.strip()
        if not event.startswith(b"data:") or event == b"data: [DONE]":
            continue
        try:
            payload = orjson.loads(event[5:])
        except orjson.JSONDecodeError:
            continue
        for choice in payload.get("choices") or [] if isinstance(payload, dict) else []:
            delta = choice.get("delta") or {}
            if isinstance(delta.get("content"), str):
                parts.append(delta["content"])
            elif isinstance(choice.get("text"), str):
                parts.append(choice["text"])
    return "".join(parts)


def answer_text(record: bytes, stream: bool) -> str:
    """The answer's text in an idempotency record (gateway.outcome.make_record)."""
    raw = record.partition(b"|")[2].partition(b"|")[2]
    if stream:
        return text_of_stream(raw)
    try:
        return completion_text(orjson.loads(raw))
    except orjson.JSONDecodeError:
        return ""


def _save(row: dict[str, Any]) -> None:
    MirrorSample.objects.create(**row)


async def mirror_replay(
    *,
    client: httpx.AsyncClient,
    endpoint: str,
    body: dict[str, Any] | StreamedBody,
    request_id: str,
    key_id: int | None,
    lane: str,
    local_text: str,
    local_latency_ms: float,
    local_completion_tokens: int | None,
    large_slot: bool = False,
) -> None:
    """`body`: a small request's parsed body, or a large one's mirror body cut from its raw
    bytes (then `large_slot`: it holds one of LARGE_MIRRORS, given back at the end)."""
    try:
        await _replay(client=client, endpoint=endpoint, body=body, request_id=request_id, key_id=key_id, lane=lane,
                      local_text=local_text, local_latency_ms=local_latency_ms,
                      local_completion_tokens=local_completion_tokens)
    finally:
        if large_slot:
            LARGE_MIRRORS.give_back()


async def _replay(
    *,
    client: httpx.AsyncClient,
    endpoint: str,
    body: dict[str, Any] | StreamedBody,
    request_id: str,
    key_id: int | None,
    lane: str,
    local_text: str,
    local_latency_ms: float,
    local_completion_tokens: int | None,
) -> None:
    content = body if isinstance(body, StreamedBody) else mirror_body(body)
    path = "/chat/completions" if endpoint == "chat.completions" else "/completions"
    arguments = body_arguments(content)
    headers = arguments.pop("headers")
    if settings.GATEWAY_MIRROR_API_KEY:
        headers["authorization"] = f"Bearer {settings.GATEWAY_MIRROR_API_KEY}"
    row: dict[str, Any] = {
        "request_id": request_id, "key_id": key_id, "lane": lane, "external_model": settings.GATEWAY_MIRROR_MODEL,
        "local_latency_ms": local_latency_ms, "local_chars": len(local_text),
        "local_completion_tokens": local_completion_tokens,
    }
    started = time.perf_counter()
    try:
        response = await client.post(
            settings.GATEWAY_MIRROR_BASE_URL.rstrip("/") + path, **arguments, headers=headers,
            timeout=settings.GATEWAY_MIRROR_TIMEOUT_S,
        )
        row["external_latency_ms"] = (time.perf_counter() - started) * 1000
        if response.status_code != 200:
            row["error"] = f"external endpoint answered {response.status_code}"
        else:
            payload = orjson.loads(response.content)
            text = completion_text(payload)
            row.update(external_chars=len(text), external_completion_tokens=usage_from(payload).completion_tokens,
                       divergence=divergence(local_text, text))
    except Exception as exc:  # the mirror never affects anyone: record and move on
        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
    try:
        await db_call(_save, row)
    except Exception:
        log.exception("gateway: could not save a mirrored sample")

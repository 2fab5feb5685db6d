"""The playground's "send it": one chat completion to a lane, streamed back as plain text.
One request, no retry (a team lead's test spends the lane's time like any other)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import orjson

from core.http import async_http_client
from lanes.models import Lane

PLAYGROUND_MAX_TOKENS = 512


async def stream_answer(*, base_url: str, model: str, prompt: str) -> AsyncIterator[bytes]:
    body = {"model": model, "messages": [{"role": "user", "content": prompt}], "stream": True,
            "max_tokens": PLAYGROUND_MAX_TOKENS}
    try:
        async with async_http_client(timeout=httpx.Timeout(120, connect=3)) as client, \
                client.stream("POST", f"{base_url}/v1/chat/completions", json=body) as response:
            if response.status_code != 200:
                yield f"[the lane answered {response.status_code}: {(await response.aread())[:300]!r}]".encode()
                return
            async for line in response.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                try:
                    chunk = orjson.loads(line[6:])
                except orjson.JSONDecodeError:
                    continue
                for choice in chunk.get("choices") or []:
                    text = (choice.get("delta") or {}).get("content")
                    if text:
                        yield text.encode()
    except httpx.HTTPError as exc:
        yield f"[the lane could not be reached: {type(exc).__name__}]".encode()


def lane_target(lane: Lane) -> tuple[str, str]:
    """(base URL, model name) of a lane, for the playground."""
    return lane.base_url(), lane.public_model_name

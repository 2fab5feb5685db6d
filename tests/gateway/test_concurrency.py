"""The seed's production load shape: 200 users at once. Every stream completes, each sent
upstream exactly once, to a sparksim engine (no timing asserted: figures live in
perf/gateway_overhead.py)."""

from __future__ import annotations

import asyncio

import aiohttp

from sparksim.standalone import EngineHandle
from tests.gateway.conftest import Gateway, engine_completed, run_async

CLIENTS = 200


def test_200_concurrent_streams_all_complete_without_error(gateway: Gateway, qwen_engine: EngineHandle) -> None:
    gateway = gateway
    headers = {**gateway.headers(), "x-stainless-retry-count": "0"}  # the SDK's path: retry recognition on

    async def one(session: aiohttp.ClientSession, n: int) -> bytes:
        body = {"model": "auto", "stream": True, "max_tokens": 8, "messages": [{"role": "user", "content": f"user {n}"}]}
        async with session.post(f"{gateway.base_url}/chat/completions", json=body, headers=headers) as response:
            assert response.status == 200, await response.text()
            return await response.read()

    async def everyone() -> list[bytes]:
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
            return list(await asyncio.gather(*(one(session, n) for n in range(CLIENTS))))

    answers = run_async(everyone)
    assert all(answer.endswith(b"data: [DONE]\n\n") and b'"error"' not in answer for answer in answers)
    assert engine_completed(qwen_engine) == CLIENTS

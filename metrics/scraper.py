"""The scraper's I/O edge: every target at once, each bounded by its own timeout. A target
that fails comes back as an error string, never as an exception, so one dead lane or an
unreachable node can neither crash nor stall the tick.

Nodes are read over the jobs app's transports (SSH or local): metrics depends on jobs and
lanes, neither of them on metrics."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import httpx

from jobs.transports import NodeEndpoint, TransportError, transport_for
from metrics.nodeprobe import PROBE_COMMAND, NodeReading, parse_probe_output
from metrics.parsing import EngineReading, parse_vllm_metrics


@dataclass(frozen=True)
class LaneTarget:
    name: str
    metrics_url: str


@dataclass
class ScrapeResult:
    kind: str
    name: str
    reading: EngineReading | NodeReading | None
    error: str
    duration_ms: float


def _describe(exc: BaseException) -> str:
    text = str(exc) or type(exc).__name__
    return text[:300]


async def scrape_lane(client: httpx.AsyncClient, target: LaneTarget, timeout_s: float) -> ScrapeResult:
    started = time.monotonic()
    try:
        response = await asyncio.wait_for(client.get(target.metrics_url), timeout=timeout_s)
        response.raise_for_status()
        reading: EngineReading | None = parse_vllm_metrics(response.text, at=time.time())
        error = ""
    except TimeoutError:
        reading, error = None, f"no answer from {target.metrics_url} within {timeout_s:g}s"
    except httpx.HTTPStatusError as exc:
        reading, error = None, f"{target.metrics_url} answered HTTP {exc.response.status_code}"
    except (httpx.HTTPError, OSError) as exc:
        reading, error = None, f"{target.metrics_url}: {_describe(exc)}"
    except ValueError as exc:  # the text parser's complaint about a malformed line
        reading, error = None, f"{target.metrics_url}: unreadable metrics ({_describe(exc)})"
    return ScrapeResult("lane", target.name, reading, error, (time.monotonic() - started) * 1000)


def _ignore_line(stream: str, raw: bytes, dropped: int) -> None:
    """Output is captured, not logged."""


async def scrape_node(endpoint: NodeEndpoint, timeout_s: float) -> ScrapeResult:
    started = time.monotonic()
    transport = transport_for(endpoint)
    try:
        result = await asyncio.wait_for(
            transport.run(PROBE_COMMAND, on_line=_ignore_line, timeout_s=timeout_s, capture=True), timeout=timeout_s
        )
        reading: NodeReading | None = parse_probe_output(result.stdout, at=time.time())
        error = "" if result.ok else f"probe exited {result.exit_code}: {' '.join(result.stderr)[:200]}"
        if reading is not None and reading.mem_available_kib is None:
            reading, error = None, error or "probe printed no MemAvailable"
    except TimeoutError:
        reading, error = None, f"no answer within {timeout_s:g}s"
    except (TransportError, OSError) as exc:
        reading, error = None, _describe(exc)
    finally:
        with contextlib.suppress(TimeoutError, OSError, TransportError):
            await asyncio.wait_for(transport.close(), timeout=1.0)
    return ScrapeResult("node", endpoint.name, reading, error, (time.monotonic() - started) * 1000)


async def scrape_all(
    lanes: list[LaneTarget], nodes: list[NodeEndpoint], *, timeout_s: float, client: httpx.AsyncClient,
    concurrency: int = 64,
) -> list[ScrapeResult]:
    """Every target at once, at most `concurrency` in flight (sockets, SSH channels, child
    processes); each target's timeout starts when its turn comes."""
    slots = asyncio.Semaphore(concurrency)

    async def bounded(scrape: Coroutine[Any, Any, ScrapeResult]) -> ScrapeResult:
        async with slots:
            return await scrape

    tasks = [bounded(scrape_lane(client, lane, timeout_s)) for lane in lanes]
    tasks += [bounded(scrape_node(node, timeout_s)) for node in nodes]
    return list(await asyncio.gather(*tasks))

"""The client measured while it loads a lane: its CPU, wall time and event-loop lag, and the
host's CPUs beside them, so a saturated client (or a contended host) is reported instead of
showing up as a slow lane (benchmarks.loadgen)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import psutil

from core.stats import percentile_linear

# The client is saturated when its process keeps one core this busy, or when its event loop
# wakes this late: either way the figures measure the client, not the lane.
SATURATED_CPU_SHARE = 0.9
SATURATED_LAG_S = 0.05
# A late event loop on a host whose CPUs were this busy is the host's contention, not the client's.
HOST_BUSY_SHARE = 0.9
LAG_TICK_S = 0.02


@dataclass
class ClientLoad:
    cpu_s: float = 0.0
    wall_s: float = 0.0
    parse_s: float = 0.0
    chunks: int = 0
    lag_p99_s: float = 0.0
    lag_max_s: float = 0.0
    host_busy_share: float = 0.0  # all of the host's CPUs over the level, every process
    host_load_per_core: float = 0.0  # the 1-minute load average over the CPU count, at the end

    @property
    def cpu_share(self) -> float:
        return self.cpu_s / self.wall_s if self.wall_s > 0 else 0.0

    @property
    def saturated_because(self) -> str:
        if self.cpu_share >= SATURATED_CPU_SHARE:
            return f"the client used {self.cpu_share:.0%} of a core"
        if self.lag_p99_s >= SATURATED_LAG_S:
            late = f"the client's event loop woke {self.lag_p99_s * 1000:.0f} ms late (p99)"
            if self.host_busy_share >= HOST_BUSY_SHARE:  # other processes kept the client waiting
                return (f"{late} while the host's CPUs were {self.host_busy_share:.0%} busy (load "
                        f"{self.host_load_per_core:.2f} per core) and the client used {self.cpu_share:.0%} "
                        f"of a core: the host is contended")
            return late
        return ""

    def as_dict(self) -> dict[str, Any]:
        return {
            "cpu_s": self.cpu_s, "wall_s": self.wall_s, "cpu_share": self.cpu_share,
            "parse_us_per_chunk": self.parse_s / self.chunks * 1e6 if self.chunks else 0.0,
            "loop_lag_p99_ms": self.lag_p99_s * 1000, "loop_lag_max_ms": self.lag_max_s * 1000,
            "host_busy_share": self.host_busy_share, "host_load_per_core": self.host_load_per_core,
            "saturated": bool(self.saturated_because), "saturated_because": self.saturated_because,
        }


async def _watch_lag(lags: list[float]) -> None:
    loop = asyncio.get_running_loop()
    while True:
        before = loop.time()
        await asyncio.sleep(LAG_TICK_S)
        lags.append(max(0.0, loop.time() - before - LAG_TICK_S))


def _cpu_total(times: Any) -> float:
    # Linux counts guest time inside user time already.
    return sum(value for name, value in times._asdict().items() if name not in ("guest", "guest_nice"))


@contextlib.asynccontextmanager
async def measuring(load: ClientLoad) -> AsyncIterator[None]:
    """The client's CPU, wall time and event-loop lag over the block, into `load`."""
    lags: list[float] = []
    watcher = asyncio.get_running_loop().create_task(_watch_lag(lags))
    cpu_before, wall_before = time.process_time(), time.perf_counter()
    host_before = psutil.cpu_times()
    try:
        yield
    finally:
        watcher.cancel()
    load.cpu_s = time.process_time() - cpu_before
    load.wall_s = time.perf_counter() - wall_before
    host_after = psutil.cpu_times()
    idle = (host_after.idle - host_before.idle) + (getattr(host_after, "iowait", 0.0) - getattr(host_before, "iowait", 0.0))
    total = _cpu_total(host_after) - _cpu_total(host_before)
    load.host_busy_share = max(0.0, 1.0 - idle / total) if total > 0 else 0.0
    load.host_load_per_core = os.getloadavg()[0] / (os.cpu_count() or 1)
    load.lag_p99_s = percentile_linear(lags, 0.99) or 0.0
    load.lag_max_s = max(lags, default=0.0)

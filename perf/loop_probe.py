"""Inside the benchmarked gateway process: how late its event loop runs, and whose CPU the
machine spends, so a slow small request can be told apart as the portal blocking its own
loop or as the process waiting for one of the 2 cores.

`serve(port, stacks=...)` runs the portal's ASGI app as production does (uvicorn, uvloop,
httptools, no access log), wrapped so that:
- a task sleeps 1 ms again and again and records how late it wakes up (the loop's lag:
  any callback that holds the loop, or the process not getting a CPU, shows up here),
  and how much CPU the loop's thread used between two wake-ups (its own work: what the
  portal itself held the loop for, whatever the rest of the machine does; the lag minus
  that is time spent waiting for a core);
- GET /__bench/probe answers (and resets) the lag's percentiles, the longest stalls, and
  the CPU seconds of the loop's thread, of the process's other threads and of its worker
  processes since the previous call. The tick runs from the first such call until one
  with `?stop` (it costs the process some CPU: off for the other measurements);
- with `stacks`, a watchdog thread samples the loop thread's Python stack whenever the
  loop has not ticked for 5 ms (what the loop was doing while it stalled). It competes for
  the GIL, so figures are taken without it and stacks in a separate run.

Bench-only: the portal never imports this module."""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import sys
import threading
import time
import traceback
from collections import Counter
from typing import Any

import orjson

from core.stats import percentile_nearest_rank

TICK_S = 0.001
STALL_S = 0.005
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def proc_cpu_s(pid: int) -> float:
    """utime + stime of a process, in seconds (0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


class LoopProbe:
    def __init__(self, *, stacks: bool) -> None:
        self.lags: list[float] = []
        self.busy: list[float] = []
        self.last = time.perf_counter()
        self.stacks: Counter[str] = Counter()
        self.stack_samples = 0
        self.loop_thread = threading.get_ident()
        self.started = False
        self.ticking: asyncio.Task[None] | None = None
        self.want_stacks = stacks
        self._mark = self._cpu()

    def _cpu(self) -> tuple[float, float, float, float]:
        workers = sum(proc_cpu_s(child.pid) for child in multiprocessing.active_children() if child.pid)
        return time.perf_counter(), time.thread_time(), time.process_time(), workers

    def start(self) -> None:
        if self.started:
            return
        self.started = True
        self.loop_thread = threading.get_ident()
        self._mark = self._cpu()
        if self.want_stacks:
            threading.Thread(target=self._watch, daemon=True).start()

    async def _tick(self) -> None:
        while True:
            before, cpu_before = time.perf_counter(), time.thread_time()
            await asyncio.sleep(TICK_S)
            self.last = now = time.perf_counter()
            self.lags.append(now - before - TICK_S)
            self.busy.append(time.thread_time() - cpu_before)

    def _watch(self) -> None:
        while True:
            time.sleep(0.002)
            if time.perf_counter() - self.last < STALL_S:
                continue
            frame = sys._current_frames().get(self.loop_thread)
            if frame is None:
                continue
            frames = [f for f in traceback.extract_stack(frame)
                      if "asyncio" not in f.filename and "loop_probe" not in f.filename][-5:]
            self.stacks[" < ".join(f"{os.path.basename(f.filename)}:{f.lineno} {f.name}"
                                   for f in reversed(frames))] += 1
            self.stack_samples += 1

    def snapshot(self) -> dict[str, Any]:
        """Since the previous snapshot (which it resets)."""
        lags, self.lags = sorted(self.lags), []
        busy, self.busy = sorted(self.busy), []
        now = self._cpu()
        (wall0, loop0, proc0, work0), self._mark = self._mark, now
        wall, loop_cpu, proc, work = now[0] - wall0, now[1] - loop0, now[2] - proc0, now[3] - work0

        def ms(q: float, values: list[float] = lags) -> float:
            # Nearest rank, as every timing of the portal's own here: an observed lag.
            value = percentile_nearest_rank(values, q)
            return round(value * 1000, 2) if value is not None else float("nan")

        stacks, self.stacks, samples, self.stack_samples = self.stacks, Counter(), self.stack_samples, 0
        return {
            "wall_s": round(wall, 2), "ticks": len(lags),
            "lag_p50_ms": ms(0.5), "lag_p99_ms": ms(0.99), "lag_p999_ms": ms(0.999),
            "lag_max_ms": round(lags[-1] * 1000, 2) if lags else None,
            # the loop thread's own CPU between two wake-ups of the 1 ms tick
            "busy_p99_ms": ms(0.99, busy), "busy_p999_ms": ms(0.999, busy),
            "busy_max_ms": round(busy[-1] * 1000, 2) if busy else None,
            "busy_over_2ms": sum(1 for value in busy if value > 0.002),
            # time the loop spent more than 5 ms late, in all
            "stalled_ms": round(sum(lag for lag in lags if lag > STALL_S) * 1000, 1),
            "loop_thread_cpu_s": round(loop_cpu, 3), "other_threads_cpu_s": round(proc - loop_cpu, 3),
            "workers_cpu_s": round(work, 3),
            "stall_stacks": [[count, stack] for stack, count in stacks.most_common(12)],
            "stall_samples": samples,
        }


def wrap(app: Any, probe: LoopProbe) -> Any:
    async def probed(scope: Any, receive: Any, send: Any) -> None:
        probe.start()
        if scope["type"] == "http" and scope["path"] == "/__bench/probe":
            body = orjson.dumps(probe.snapshot())
            if scope.get("query_string") == b"stop":
                if probe.ticking is not None:
                    probe.ticking.cancel()
                    probe.ticking = None
            elif probe.ticking is None:
                probe.ticking = asyncio.get_running_loop().create_task(probe._tick())
            await send({"type": "http.response.start", "status": 200,
                        "headers": [(b"content-type", b"application/json")]})
            await send({"type": "http.response.body", "body": body})
            return
        await app(scope, receive, send)

    return probed


def serve(port: int, *, stacks: bool) -> None:
    import uvicorn

    from portal.asgi import application

    probe = LoopProbe(stacks=stacks)
    uvicorn.run(wrap(application, probe), host="127.0.0.1", port=port, loop="uvloop", http="httptools",
                access_log=False, log_level="warning", lifespan="on")

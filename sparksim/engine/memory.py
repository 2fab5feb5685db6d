"""What an engine takes from its nodes' unified memory, over time (the memory model).

On a Spark the GPU and the OS share one memory, so an engine's weights, KV pool and start-up
transients come straight out of MemAvailable (sparksim.host.procfs). Start-up is when memory
falls fastest (seed 004, vllm#56824): weights load over the first 60% of it, then the KV pool
is allocated and CUDA-graph capture holds a transient on top until the server is up. A
`leak` fault (`--sim-leak-gib-per-s`, or `leak_gib_per_s` on /_sim/faults) adds that much per
simulated second, during start-up and while serving; at MemAvailable 0 the node wedges
(sparksim.host.wedge).
"""

import asyncio
import os

from sparksim.engine.config import ACTIVATION_OVERHEAD_GIB, EngineConfig
from sparksim.host.node import NodeInfo
from sparksim.host.procfs import record_budget

LOADING_SHARE = 0.6  # of the start-up: weights loading (the rest: profile, KV, graph capture)
CAPTURE_TRANSIENT_GIB = 3.0  # held during CUDA-graph capture, given back once serving
TRACK_INTERVAL_S = 0.1  # real seconds between two budget writes while memory moves
RECORD_STEP_GIB = 0.01


class EngineMemory:
    """The engine's budget per node; `track` keeps the nodes' meminfo in step with it."""

    def __init__(self, config: EngineConfig, nodes: list[NodeInfo]) -> None:
        self.config = config
        self.nodes = nodes
        self.pid = os.getpid()
        self.serving = False
        self.elapsed_s = 0.0  # simulated seconds since the process started loading
        self.leaked_gib = 0.0
        self.recorded: float | None = None

    @property
    def weights_gib(self) -> float:
        config = self.config
        return config.memory_budget_gib - config.kv_cache_gib - ACTIVATION_OVERHEAD_GIB

    def gib(self) -> float:
        config = self.config
        if self.serving:
            held = config.memory_budget_gib
        else:
            loading = config.profile.startup_s * LOADING_SHARE
            if loading > 0 and self.elapsed_s < loading:
                held = self.weights_gib * self.elapsed_s / loading
            else:
                held = config.memory_budget_gib + CAPTURE_TRANSIENT_GIB
        return held + self.leaked_gib

    def advance(self, simulated_s: float) -> None:
        self.elapsed_s += simulated_s
        self.leaked_gib += float(self.config.faults.leak_gib_per_s) * simulated_s

    def record(self, *, force: bool = False) -> None:
        value = self.gib()
        if not force and self.recorded is not None and abs(value - self.recorded) < RECORD_STEP_GIB:
            return
        self.recorded = value
        for node in self.nodes:
            record_budget(node, self.pid, value)

    def start_serving(self) -> None:
        """The server is about to listen: the transient is given back (written at once, so a
        healthy engine's node already shows its final budget)."""
        self.serving = True
        self.record(force=True)

    async def track(self) -> None:
        loop = asyncio.get_running_loop()
        self.record(force=True)
        last = loop.time()
        while True:
            await asyncio.sleep(TRACK_INTERVAL_S)
            now = loop.time()
            self.advance((now - last) / self.config.time_scale)
            last = now
            self.record()

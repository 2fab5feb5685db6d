"""The engine process: parse flags, join the cluster, load (simulated), serve, shut down."""

import asyncio
import contextlib
import json
import os
import signal
import sys
import traceback
from collections.abc import Awaitable, Callable
from pathlib import Path

from aiohttp import web

from sparksim.engine.cluster_join import ClusterJoinError, join_cluster, watch_members
from sparksim.engine.config import ConfigError, EngineConfig, build_engine_config
from sparksim.engine.fabric import FabricError, check_fabric
from sparksim.engine.log import log
from sparksim.engine.memory import EngineMemory
from sparksim.engine.server import VLLM_VERSION, EngineServer
from sparksim.engine.vllm_args import parse_serve_args
from sparksim.files import write_atomically
from sparksim.host.node import NodeInfo, load_node
from sparksim.host.procfs import drop_budget
from sparksim.host.sysfs import add_traffic
from sparksim.rendezvous import Member
from sparksim.timing import with_overrides

STATS_INTERVAL_S = 10.0


def main(argv: list[str]) -> int:
    args = parse_serve_args(argv)  # exits 2 with argparse's "vllm serve: error: ..." text
    log("INFO", "api_server.py", f"vLLM API server version {VLLM_VERSION}")
    log("INFO", "utils.py", f"non-default args: {non_default_args(argv)}")
    try:
        config = build_engine_config(args)
    except ConfigError as error:
        return fail_start(error)
    try:
        return asyncio.run(serve(config))
    except ConfigError as error:
        return fail_start(error)
    except ClusterJoinError as error:
        log("ERROR", "core.py", "EngineCore failed to start.")
        print(f"{error.kind}: {error}", flush=True)
        return 1


def non_default_args(argv: list[str]) -> dict[str, str]:
    pairs: dict[str, str] = {}
    key = None
    for item in argv:
        if item.startswith(("--sim-", "--time-scale")):
            key = "_sim"
            continue
        if item.startswith("--"):
            key = item[2:].replace("-", "_")
            pairs[key] = "True"
        elif key is not None:
            pairs[key] = item
            key = None
        else:
            pairs["model_tag"] = item
    pairs.pop("_sim", None)
    return pairs


def fail_start(error: Exception) -> int:
    log("ERROR", "core.py", "EngineCore failed to start.")
    print("Traceback (most recent call last):", flush=True)
    print('  File "/usr/local/lib/python3.12/dist-packages/vllm/engine/arg_utils.py", '
          "line 1423, in create_engine_config", flush=True)
    print(f"ValueError: {error}", flush=True)
    return 1


async def serve(config: EngineConfig) -> int:
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    node = load_node(config.node_dir) if config.node_dir else None
    members = await join_cluster(config, stop)
    if stop.is_set():
        return 0
    if len(members) > 1 and not config.headless:
        try:
            verdict = check_fabric(members)
        except FabricError as error:
            log("ERROR", "core.py", "EngineCore failed to start.")
            print(f"RuntimeError: {error}", flush=True)
            return 1
        profile = config.profile
        config.profile = with_overrides(
            profile,
            decode_tok_s=profile.decode_tok_s * verdict.speed_factor,
            prefill_tok_s=profile.prefill_tok_s * verdict.speed_factor,
        )
    # Memory each node gives up: a Ray engine's workers live in this process, so it books
    # every member; a native rank books only its own node (each rank is its own process).
    if config.executor == "ray" and members:
        budget_nodes = [load_node(member.sim_dir) for member in members]
    else:
        budget_nodes = [node] if node else []
    memory = EngineMemory(config, budget_nodes)
    if config.headless:
        memory.serving = True  # a headless rank has no start-up of its own to simulate
    tracker = loop.create_task(memory.track())
    try:
        if config.headless:
            log("INFO", "api_server.py", "Launching headless engine; waiting for rank 0.")
            watcher: asyncio.Task[bool] = loop.create_task(watch_members(members, stop))
            await stop.wait()
            lost = watcher.done() and not watcher.cancelled() and watcher.result()
            watcher.cancel()
            return 1 if lost else 0
        fabric_nodes = [load_node(member.sim_dir) for member in members]
        return await serve_http(config, members, fabric_nodes, stop, memory)
    finally:
        tracker.cancel()
        for budget_node in budget_nodes:
            drop_budget(budget_node, os.getpid())


async def serve_http(
    config: EngineConfig, members: list[Member], fabric_nodes: list[NodeInfo],
    stop: asyncio.Event, memory: EngineMemory,
) -> int:
    loop = asyncio.get_running_loop()
    await simulate_loading(config, stop)
    if stop.is_set():
        return 0
    if config.fail_start:
        log("ERROR", "core.py", "EngineCore failed to start.")
        print("Traceback (most recent call last):", flush=True)
        print(f"{config.fail_start}", flush=True)
        return 1
    server = EngineServer(config)
    exit_code = 0

    def on_death() -> None:
        nonlocal exit_code
        if server.faults.exit_on_death:
            exit_code = 1
            loop.call_later(0.2, stop.set)

    server.on_death = on_death
    server.core.start()
    # vLLM exits within a second or two of SIGINT; so do we, open streams or not.
    runner = web.AppRunner(server.app, access_log=None, handle_signals=False,
                           shutdown_timeout=2.0, handler_cancellation=server.cancels_on_disconnect)
    await runner.setup()
    set_listening = _listener(runner, config)
    server.set_listening = set_listening
    if config.faults.refuse_connections_s:
        seconds = config.faults.refuse_connections_s
        log("WARNING", "sparksim", f"refusing connections for {seconds}s")
        await asyncio.sleep(config.faults.refuse_connections_s)
    memory.start_serving()
    try:
        await set_listening(True)
    except OSError as error:
        log("ERROR", "api_server.py", f"OSError: [Errno {error.errno}] {error.strerror}")
        await runner.cleanup()
        return 1
    _announce_started(config)
    background = [
        loop.create_task(log_stats(server)),
        loop.create_task(account_traffic(server, fabric_nodes)),
    ]
    if len(members) > 1:
        background.append(loop.create_task(watch_peers(members, stop, server)))
    await stop.wait()
    log("INFO", "launcher.py", "Shutting down FastAPI HTTP server.")
    for task in background:
        task.cancel()
    await server.core.stop()
    await runner.cleanup()
    print("INFO:     Shutting down", flush=True)
    print("INFO:     Application shutdown complete.", flush=True)
    return exit_code or (1 if server.core.dead and server.faults.exit_on_death else 0)


def _listener(runner: web.AppRunner, config: EngineConfig) -> Callable[[bool], Awaitable[None]]:
    """Opens and closes the engine's listening socket (a refuse-connections fault closes it)."""
    site: web.TCPSite | None = None

    async def set_listening(listening: bool) -> None:
        nonlocal site
        if listening and site is None:
            site = web.TCPSite(runner, config.host, config.port, reuse_address=True,
                               backlog=1024)
            await site.start()
        elif not listening and site is not None:
            await site.stop()
            site = None

    return set_listening


def _announce_started(config: EngineConfig) -> None:
    address = f"http://{config.host}:{config.port}"
    log("INFO", "api_server.py", f"Starting vLLM API server 0 on {address}")
    log("INFO", "launcher.py", "Available routes are: /health, /v1/models, /v1/chat/completions, "
        "/v1/completions, /tokenize, /metrics")
    print(f"INFO:     Started server process [{os.getpid()}]", flush=True)
    print("INFO:     Waiting for application startup.", flush=True)
    print("INFO:     Application startup complete.", flush=True)


async def watch_peers(members: list[Member], stop: asyncio.Event, server: EngineServer) -> None:
    await watch_members(members, stop, server)


async def simulate_loading(config: EngineConfig, stop: asyncio.Event) -> None:
    startup = config.scaled(config.profile.startup_s)
    log("INFO", "gpu_model_runner.py", f"Starting to load model {config.model}...")
    try:
        await asyncio.wait_for(stop.wait(), timeout=startup * 0.6)
        return
    except TimeoutError:
        pass
    log("INFO", "gpu_model_runner.py",
        f"Loading weights took {config.profile.startup_s * 0.6:.2f} seconds")
    log("INFO", "kv_cache_utils.py", f"GPU KV cache size: {config.kv_pool_tokens:,} tokens")
    log("INFO", "kv_cache_utils.py",
        f"Maximum concurrency for {config.max_model_len:,} tokens per request: "
        f"{config.kv_pool_tokens / config.max_model_len:.2f}x")
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), timeout=startup * 0.4)
    log("INFO", "core.py", f"init engine (profile, create kv cache, warmup model) took "
        f"{config.profile.startup_s * 0.4:.2f} seconds")


async def log_stats(server: EngineServer) -> None:
    last_prompt = last_generated = 0
    while True:
        await asyncio.sleep(STATS_INTERVAL_S)
        counters = server.core.metrics.counters
        prompt = counters["prompt_tokens"] - last_prompt
        generated = counters["generation_tokens"] - last_generated
        last_prompt, last_generated = counters["prompt_tokens"], counters["generation_tokens"]
        queries = counters["prefix_cache_queries"] or 1
        log("INFO", "loggers.py",
            f"Engine 000: Avg prompt throughput: {prompt / STATS_INTERVAL_S:.1f} tokens/s, "
            f"Avg generation throughput: {generated / STATS_INTERVAL_S:.1f} tokens/s, "
            f"Running: {server.core.active_sequences} reqs, "
            f"Waiting: {server.core.metrics.waiting} reqs, "
            f"GPU KV cache usage: {server.core.metrics.kv_usage * 100:.1f}%, "
            f"Prefix cache hit rate: {counters['prefix_cache_hits'] / queries * 100:.1f}%")


# All-reduce volume per token processed by a TP group (hidden 7168 x 2 bytes x 61 layers x 2).
FABRIC_OCTETS_PER_TOKEN = 1_750_000


class TrafficMeter:
    """A tensor-parallel group's all-reduce traffic on its nodes' RoCE counters: the tokens
    processed since the last flush, spread over the group's nodes."""

    def __init__(self, server: EngineServer, nodes: list[NodeInfo]) -> None:
        self.server, self.nodes, self.last = server, nodes, 0

    def flush(self) -> None:
        counters = self.server.core.metrics.counters
        tokens = counters["prompt_tokens"] + counters["generation_tokens"]
        if tokens > self.last:
            for node in self.nodes:
                add_traffic(node, (tokens - self.last) * FABRIC_OCTETS_PER_TOKEN // len(self.nodes))
            self.last = tokens


async def account_traffic(server: EngineServer, nodes: list[NodeInfo]) -> None:
    """Counters move every second while requests run, and whenever a request ends (before
    its client sees the end), so a reading taken after a benchmark level holds all of it."""
    if len(nodes) < 2:
        return
    meter = TrafficMeter(server, nodes)
    server.core.on_release.append(meter.flush)
    while True:
        await asyncio.sleep(1.0)
        meter.flush()


def write_exit_code(state_dir: Path | None, code: int) -> None:
    if state_dir is None:
        return
    write_atomically(state_dir / f"exit-{os.getpid()}.json", json.dumps({"code": code}))


def run(argv: list[str]) -> int:
    """Entry point used by `python -m sparksim vllm serve ...` and `... engine ...`."""
    state_dir = None
    for index, item in enumerate(argv):
        if item == "--sim-state-dir" and index + 1 < len(argv):
            state_dir = Path(argv[index + 1])
    code = 1
    try:
        code = main(argv)
    except SystemExit as exit_:
        code = exit_.code if isinstance(exit_.code, int) else 1
    except Exception:
        traceback.print_exc()
        code = 1
    write_exit_code(state_dir, code)
    return code


if __name__ == "__main__":
    sys.exit(run(sys.argv[1:]))

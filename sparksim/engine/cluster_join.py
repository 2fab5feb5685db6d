"""Multi-node start-up: wait for Ray GPUs or native ranks, then watch that they stay alive."""

import asyncio
import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from sparksim.engine.config import EngineConfig
from sparksim.engine.log import log
from sparksim.host.node import load_node
from sparksim.rendezvous import Member, members, native_address, register

if TYPE_CHECKING:
    from sparksim.engine.server import EngineServer

WAIT_LOG_INTERVAL_S = 10.0  # simulated seconds, like vLLM's placement-group wait message
POLL_S = 0.05


class ClusterJoinError(Exception):
    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


async def join_cluster(config: EngineConfig, stop: asyncio.Event) -> list[Member]:
    world = config.tensor_parallel_size
    if config.executor == "ray":
        return await _join_ray(config, stop, world)
    if config.nnodes > 1:
        return await _join_native(config, stop)
    return []


def _root(config: EngineConfig) -> Path:
    if config.node_dir is None:
        raise ClusterJoinError("ValueError", "multi-node serving needs --sim-node-dir")
    return config.node_dir.parent


async def _join_ray(config: EngineConfig, stop: asyncio.Event, world: int) -> list[Member]:
    ray_file = config.state_dir / "ray.json" if config.state_dir else None
    specs = [{"GPU": 1.0}] * world
    if ray_file is None or not ray_file.is_file():
        # Like ray.init() without a cluster: a local instance with this node's one GPU.
        log("INFO", "worker.py", "Started a local Ray instance.")
        if world <= 1:
            return []
        await _wait(config, stop, lambda: None, lambda: _log_placement_wait(specs))
        if stop.is_set():
            return []
        raise _placement_error(config, specs)
    address = json.loads(ray_file.read_text())["address"]
    root = _root(config)
    log("INFO", "ray_utils.py", f"Connecting to existing Ray cluster at address: {address}.")

    def ready() -> list[Member] | None:
        live = list(members(root, "ray", address).values())
        return live if len(live) >= world else None

    found = await _wait(config, stop, ready, lambda: _log_placement_wait(specs))
    if found is None:
        if stop.is_set():
            return []
        raise _placement_error(config, specs)
    found.sort(key=lambda member: member.role != "head")
    return found[:world]


def _log_placement_wait(specs: list[dict[str, float]]) -> None:
    log("INFO", "ray_utils.py",
        f"Waiting for creating a placement group of specs for {WAIT_LOG_INTERVAL_S:.0f} seconds. "
        f"specs={specs}. Check `ray status` and `ray list nodes` to see if you have enough "
        "resources, and make sure the IP addresses used by ray cluster are the same as "
        "VLLM_HOST_IP environment variable specified in each node if you are running on a "
        "multi-node.")


def _placement_error(config: EngineConfig, specs: list[dict[str, float]]) -> ClusterJoinError:
    return ClusterJoinError(
        "ValueError",
        f"Cannot provide a placement group of placement_group_specs={specs} within "
        f"{config.placement_timeout_s:.0f} seconds. See `ray status` and `ray list nodes` to "
        "make sure the cluster has enough resources.",
    )


async def _join_native(config: EngineConfig, stop: asyncio.Event) -> list[Member]:
    root = _root(config)
    node = load_node(config.node_dir) if config.node_dir else None
    address = native_address(config.master_addr, config.master_port)
    register(root, "native", address, f"rank{config.node_rank}", Member(
        node=node.name if node else "", sim_dir=str(config.node_dir), pid=os.getpid(),
        role=f"rank{config.node_rank}", container=config.state_dir.name if config.state_dir else "",
    ))
    wanted = [f"rank{rank}" for rank in range(config.nnodes)]
    if config.node_rank != 0:
        wanted = ["rank0", f"rank{config.node_rank}"]
    log("INFO", "parallel_state.py",
        f"world_size={config.nnodes} rank={config.node_rank} "
        f"distributed_init_method=tcp://{address} backend=nccl")

    def ready() -> list[Member] | None:
        live = members(root, "native", address)
        if all(key in live for key in wanted):
            return [live[key] for key in sorted(live) if key in wanted]
        return None

    found = await _wait(config, stop, ready, lambda: log(
        "INFO", "parallel_state.py", f"Waiting for {config.nnodes} ranks at {address}..."))
    if found is None:
        if stop.is_set():
            return []
        raise ClusterJoinError(
            "torch.distributed.DistNetworkError",
            f"The client socket has timed out after {config.placement_timeout_s * 1000:.0f}ms "
            f"while trying to connect to ({config.master_addr}, {config.master_port}).",
        )
    return found


async def _wait(
    config: EngineConfig,
    stop: asyncio.Event,
    ready: Callable[[], list[Member] | None],
    on_waiting: Callable[[], None],
) -> list[Member] | None:
    loop = asyncio.get_running_loop()
    wait = max(config.scaled(config.placement_timeout_s), config.placement_min_real_s)
    deadline = loop.time() + wait
    next_log = loop.time() + config.scaled(WAIT_LOG_INTERVAL_S)
    while not stop.is_set():
        found = ready()
        if found is not None:
            return found
        if loop.time() >= deadline:
            return None
        if loop.time() >= next_log:
            on_waiting()
            next_log += config.scaled(WAIT_LOG_INTERVAL_S)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), timeout=POLL_S)
    return None


async def watch_members(
    watched: list[Member],
    stop: asyncio.Event,
    server: "EngineServer | None" = None,
) -> bool:
    """A tensor-parallel peer that goes away takes the whole engine with it (returns True)."""
    from sparksim.rendezvous import pid_alive

    others = [member for member in watched if member.pid != os.getpid()]
    while not stop.is_set():
        await asyncio.sleep(0.25)
        lost = [member for member in others if not pid_alive(member.pid)]
        if not lost:
            continue
        names = ", ".join(f"{member.node}/{member.role}" for member in lost)
        log("ERROR", "multiproc_executor.py", f"Worker proc(s) on {names} died unexpectedly, "
            "shutting down executor.")
        if server is not None:
            server.faults.exit_on_death = True
            server.die(f"lost tensor-parallel peer(s): {names}")
        else:
            stop.set()
        return True
    return False


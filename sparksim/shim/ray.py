"""Ray's command line inside a simulated container: start (head or worker), status, stop.

A started node registers under `<root>/_cluster/ray/<ip_port>/` for as long as its process
lives; every Spark brings one GPU.
"""

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from datetime import datetime
from pathlib import Path

from sparksim.files import write_atomically
from sparksim.host.node import NodeInfo, load_node
from sparksim.rendezvous import Member, members, pid_alive, register

CONNECT_TIMEOUT_S = 10.0  # real seconds a worker waits for its head before giving up
HEAD_LOST_GRACE_S = 2.0
CPUS_PER_SPARK = 20
MEMORY_GIB_PER_SPARK = 109.7


def ray_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="ray")
    parser.add_argument("--node-dir", required=True)
    parser.add_argument("--container", required=True)
    parser.add_argument("action", choices=["start", "status", "stop"])
    known, rest = parser.parse_known_args(argv)
    node = load_node(known.node_dir)
    state_dir = Path(node.sim_dir) / "containers" / known.container
    if known.action == "status":
        return status(node, state_dir)
    if known.action == "stop":
        return stop(state_dir)
    return start(node, known.container, state_dir, rest)


def start_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="ray start")
    add = parser.add_argument
    add("--head", action="store_true")
    add("--address", default=None)
    add("--port", type=int, default=6379)
    add("--node-ip-address", default=None)
    add("--block", action="store_true")
    add("--num-cpus", type=int, default=None)
    add("--num-gpus", type=int, default=None)
    add("--object-store-memory", default=None)
    add("--include-dashboard", default=None)
    add("--dashboard-host", default=None)
    add("--disable-usage-stats", action="store_true")
    add("--resources", default=None)
    add("--temp-dir", default=None)
    return parser


def start(node: NodeInfo, container: str, state_dir: Path, argv: list[str]) -> int:
    args = start_parser().parse_args(argv)
    node_ip = args.node_ip_address or node.address
    if not args.block:
        # Real `ray start` returns once its daemons run; ours is one blocking process. It stays
        # in this process group, so `docker rm -f` (a group kill) still reaches it.
        # Its output goes to the container log, not to the caller's pipe.
        with (state_dir / "log").open("ab") as log:
            subprocess.Popen([sys.executable, "-m", "sparksim", "ray", "--node-dir",
                              node.sim_dir, "--container", container, "start", "--block", *argv],
                             stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT)
        print("Ray runtime started.")
        return 0
    root = Path(node.sim_dir).parent
    address = f"{node_ip}:{args.port}" if args.head else str(args.address)
    role = "head" if args.head else "worker"
    if args.head:
        if any(member.role == "head" for member in members(root, "ray", address).values()):
            print(f"ConnectionError: Ray is already running at {address}.", flush=True)
            return 1
    elif not wait_for_head(root, address):
        print(f"ConnectionError: Could not read 'session_name' from GCS. Unable to connect to "
              f"GCS at {address}. Check that (1) Ray GCS with matching version started "
              "successfully at the specified address, and (2) there is no firewall setting "
              "preventing access.", flush=True)
        return 1
    member = Member(node=node.name, sim_dir=node.sim_dir, pid=os.getpid(), role=role,
                    container=container, node_ip=node_ip)
    path = register(root, "ray", address, node.name, member)
    write_atomically(state_dir / "ray.json", json.dumps({"address": address, "role": role}))
    print(f"Local node IP: {node_ip}", flush=True)
    print("-" * 20 + "\nRay runtime started.\n" + "-" * 20, flush=True)
    if args.head:
        print(f"To add another node to this Ray cluster, run\n  ray start --address='{address}'",
              flush=True)
    print("--block\n  This command will now block forever until terminated by a signal.",
          flush=True)
    block(root, address, role, path)
    return 0


def wait_for_head(root: Path, address: str) -> bool:
    deadline = time.monotonic() + CONNECT_TIMEOUT_S
    while time.monotonic() < deadline:
        if any(member.role == "head" for member in members(root, "ray", address).values()):
            return True
        time.sleep(0.05)
    return False


def block(root: Path, address: str, role: str, path: Path) -> None:
    stopped = threading.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        signal.signal(signum, lambda *_: stopped.set())
    head_lost_at: float | None = None
    while not stopped.wait(0.1):
        if role != "worker":
            continue
        head_alive = any(member.role == "head" for member in members(root, "ray", address).values())
        if head_alive:
            head_lost_at = None
            continue
        head_lost_at = head_lost_at or time.monotonic()
        if time.monotonic() - head_lost_at > HEAD_LOST_GRACE_S:
            print("raylet: the GCS at the head node is unreachable; exiting.", flush=True)
            path.unlink(missing_ok=True)
            sys.exit(1)
    path.unlink(missing_ok=True)
    print("Stopped all Ray processes.", flush=True)


def status(node: NodeInfo, state_dir: Path) -> int:
    ray_file = state_dir / "ray.json"
    if not ray_file.is_file():
        print("ConnectionError: Could not find any running Ray instance. Please specify the one "
              "to connect to by setting `--address` flag or `RAY_ADDRESS` environment variable.")
        return 1
    address = json.loads(ray_file.read_text())["address"]
    root = Path(node.sim_dir).parent
    live = list(members(root, "ray", address).values())
    if not any(member.role == "head" for member in live):
        print(f"ConnectionError: Could not connect to Ray at {address}.")
        return 1
    gpus = float(len(live))
    used = min(gpus, float(ray_engine_gpus(live)))
    stamp = datetime.now().strftime("%Y-%m-%d %H:%M:%S.%f")
    lines = [f"======== Autoscaler status: {stamp} ========", "Node status",
             "-" * 63, "Active:"]
    lines += [f" 1 node_{member.node}_{member.pid:08x}" for member in live]
    lines += ["Pending:", " (no pending nodes)", "Recent failures:", " (no failures)", "",
              "Resources", "-" * 63, "Usage:",
              f" 0.0/{CPUS_PER_SPARK * len(live)}.0 CPU",
              f" {used:.1f}/{gpus:.1f} GPU",
              f" 0B/{MEMORY_GIB_PER_SPARK * len(live):.2f}GiB memory",
              f" 0B/{len(live):.2f}GiB object_store_memory", "", "Demands:",
              " (no resource demands)"]
    print("\n".join(lines))
    return 0


def ray_engine_gpus(live: list[Member]) -> int:
    """GPUs held by a Ray-backed vLLM engine running in the head's container."""
    for member in live:
        if member.role != "head":
            continue
        procs = Path(member.sim_dir) / "containers" / member.container / "procs"
        for path in procs.glob("*.json") if procs.is_dir() else []:
            record = json.loads(path.read_text())
            command = record["command"]
            if command[:2] == ["vllm", "serve"] and pid_alive(int(record["pid"])):
                return tensor_parallel_size(command)
    return 0


def tensor_parallel_size(command: list[str]) -> int:
    for index, item in enumerate(command):
        if item in ("--tensor-parallel-size", "-tp") and index + 1 < len(command):
            return int(command[index + 1])
        if item.startswith("--tensor-parallel-size="):
            return int(item.split("=", 1)[1])
    return 1


def stop(state_dir: Path) -> int:
    procs = state_dir / "procs"
    stopped = 0
    for path in procs.glob("*.json") if procs.is_dir() else []:
        record = json.loads(path.read_text())
        if record["command"][:2] == ["ray", "start"] and pid_alive(int(record["pid"])):
            os.kill(int(record["pid"]), signal.SIGTERM)
            stopped += 1
    print(f"Stopped all {stopped} Ray processes.")
    return 0

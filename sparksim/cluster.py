"""Bring a named simulated cluster up or down (the API tests and the demo use)."""

import argparse
import ipaddress
import json
import shutil
import stat
import sys
from pathlib import Path

from sparksim.host.node import (
    DEFAULT_DISK_GIB,
    DEFAULT_MEMORY_GIB,
    ROCE_DEVICES,
    NodeInfo,
    cluster_nodes,
    load_node,
    node_json_path,
    save_node,
)
from sparksim.host.procfs import write_proc_tree
from sparksim.host.smi import nvidia_smi_script
from sparksim.host.sysfs import write_node_tree
from sparksim.host.wedge import wedged_path
from sparksim.rendezvous import cluster_dir

TOOLS = ["nvidia-smi", "ibdev2netdev", "ip", "ping", "ib_write_lat", "ib_read_lat",
         "ib_send_lat", "ib_write_bw", "mpirun", "all_reduce_perf", "all_gather_perf", "df", "ssh"]
PACKAGE_ROOT = Path(__file__).resolve().parent.parent


def cluster_up(
    root: str | Path,
    names: list[str],
    base_address: str = "127.0.0.11",
    time_scale: float = 1.0,
    memory_gib: float = DEFAULT_MEMORY_GIB,
    disk_gib: float | None = None,
) -> list[NodeInfo]:
    """Create (or refresh) one node directory per name; existing faults are kept."""
    root = Path(root).resolve()
    root.mkdir(parents=True, exist_ok=True)
    cluster_dir(root).mkdir(exist_ok=True)
    first = ipaddress.IPv4Address(base_address)
    nodes = []
    for offset, name in enumerate(names):
        sim_dir = root / name
        sim_dir.mkdir(exist_ok=True)
        address = str(first + offset)
        previous = load_node(sim_dir) if node_json_path(sim_dir).is_file() else None
        node = NodeInfo(
            name=name,
            address=address,
            sim_dir=str(sim_dir),
            host_number=int(address.rsplit(".", 1)[1]),
            memory_gib=memory_gib,
            time_scale=time_scale,
            disk_gib=disk_gib if disk_gib is not None else (previous.disk_gib if previous else DEFAULT_DISK_GIB),
            faults=previous.faults if previous else {},
        )
        node.hf_home.joinpath("hub").mkdir(parents=True, exist_ok=True)
        save_node(node)
        write_node_tree(node)
        write_proc_tree(node)
        write_wrappers(node)
        nodes.append(node)
    return nodes


def cluster_down(root: str | Path) -> None:
    """Kill every process of every container on every node, and forget the containers."""
    from sparksim.shim.containers import all_containers, container_dir, kill_processes

    root = Path(root)
    for node in cluster_nodes(root):
        for container in all_containers(node):
            kill_processes(node, container)
            shutil.rmtree(container_dir(node, container.name), ignore_errors=True)
        write_proc_tree(node)
    shutil.rmtree(cluster_dir(root), ignore_errors=True)


def write_wrappers(node: NodeInfo) -> None:
    bin_dir = Path(node.sim_dir) / "bin"
    bin_dir.mkdir(exist_ok=True)
    prologue = (f"#!/bin/sh\nexport PYTHONPATH='{PACKAGE_ROOT}'${{PYTHONPATH:+:$PYTHONPATH}}\n")
    python = sys.executable
    scripts = {"docker": prologue + f"exec '{python}' -m sparksim docker --node-dir '{node.sim_dir}' \"$@\"\n"}
    for tool in TOOLS:
        scripts[tool] = prologue + (f"exec '{python}' -m sparksim tool {tool} --node-dir '{node.sim_dir}' "
                                    "\"$@\"\n")
    # The node probe runs nvidia-smi on every node every scrape tick: a plain sh script
    # (no Python interpreter per call), as cheap on this machine as the real tool on a Spark.
    scripts["nvidia-smi"] = nvidia_smi_script(node)
    # A tool missing on a node (`tool-missing` fault) is absent from its PATH, as on a
    # Spark where nobody built nccl-tests or installed perftest.
    missing = set(node.faults.get("tools_missing", []))
    # A wedged node (sparksim.host.wedge) answers nothing: every tool on it hangs.
    gate = f"while [ -e '{wedged_path(node)}' ]; do sleep 3600; done\n"
    for name, body in scripts.items():
        body = body.replace("\n", "\n" + gate, 1) if body.startswith("#!") else gate + body
        path = bin_dir / name
        if name in missing:
            path.unlink(missing_ok=True)
            continue
        path.write_text(body)
        path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def describe(node: NodeInfo) -> dict[str, object]:
    return {
        "name": node.name,
        "address": node.address,
        "sim_dir": node.sim_dir,
        "hf_home": str(node.hf_home),
        "disk_gib": node.disk_gib,
        "fabric": {netdev: node.fabric_ip(netdev) for netdev in ROCE_DEVICES.values()},
    }


def cluster_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m sparksim cluster")
    commands = parser.add_subparsers(dest="action", required=True)
    up = commands.add_parser("up")
    up.add_argument("--root", required=True)
    up.add_argument("--nodes", required=True, help="comma-separated names, head first")
    up.add_argument("--base-address", default="127.0.0.11")
    up.add_argument("--time-scale", type=float, default=1.0)
    up.add_argument("--memory-gib", type=float, default=DEFAULT_MEMORY_GIB)
    up.add_argument("--disk-gib", type=float, default=None, help="each node's disk (default 3726, a 4 TB NVMe)")
    down = commands.add_parser("down")
    down.add_argument("--root", required=True)
    args = parser.parse_args(argv)
    if args.action == "down":
        cluster_down(args.root)
        return 0
    names = [name.strip() for name in args.nodes.split(",") if name.strip()]
    nodes = cluster_up(args.root, names, args.base_address, args.time_scale, args.memory_gib, args.disk_gib)
    print(json.dumps([describe(node) for node in nodes], indent=2))
    return 0

"""A simulated Spark's power state: its boot id, the wedge when unified memory runs out, and
`python -m sparksim power-cycle --node-dir DIR`.

Seed 004: at `--gpu-memory-utilization 0.87` both Sparks froze, SSH stopped answering, ping
went to seconds, and only a hard power cycle brought them back. No OOM kill: the kernel just
stops. Here, when a node's MemAvailable reaches 0 the node is *wedged*: every engine process
on it is frozen (SIGSTOP: sockets accept, nothing answers), its tools and `docker` hang, and a
ping to it is lost, until `power-cycle` kills everything that ran on it (containers are left
"Exited", as after a reboot) and boots it with a new boot id (sparksim.host.power).
"""

import contextlib
import os
import signal
import uuid
from pathlib import Path

from sparksim.files import write_atomically
from sparksim.host.node import NodeInfo


def wedged_path(node: NodeInfo) -> Path:
    return Path(node.sim_dir) / "wedged"


def is_wedged(node: NodeInfo) -> bool:
    return wedged_path(node).exists()


def boot_id_path(node: NodeInfo) -> Path:
    return Path(node.sim_dir) / "proc" / "sys" / "kernel" / "random" / "boot_id"


def boot_id(node: NodeInfo) -> str:
    """/proc/sys/kernel/random/boot_id: one per boot, written on first use."""
    path = boot_id_path(node)
    if not path.is_file():
        new_boot_id(node)
    return path.read_text().strip()


def new_boot_id(node: NodeInfo) -> str:
    value = str(uuid.uuid4())
    path = boot_id_path(node)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, value + "\n")
    return value


def wedge(node: NodeInfo, pids: list[int]) -> None:
    """MemAvailable reached 0: the node stops answering (the engines on it freeze)."""
    if is_wedged(node):
        return
    write_atomically(wedged_path(node), "MemAvailable reached 0 kB: the node is wedged\n")
    for pid in pids:
        if pid != os.getpid():
            _signal(pid, signal.SIGSTOP)
    if os.getpid() in pids:
        _signal(os.getpid(), signal.SIGSTOP)  # last: the caller freezes here too


def _signal(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.kill(pid, signum)

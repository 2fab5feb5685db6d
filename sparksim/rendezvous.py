"""Shared state between simulated nodes: Ray membership and native multi-node rendezvous.

Everything lives under `<root>/_cluster/` as small JSON files, one per member, and a member
counts only while its process is alive, so a killed container leaves no ghost GPUs.
"""

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from sparksim.files import write_atomically


@dataclass
class Member:
    node: str  # node name
    sim_dir: str
    pid: int
    role: str  # head/worker for Ray, rank<N> for native
    container: str
    node_ip: str = ""


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        # A zombie still answers kill(0) but is gone for every practical purpose.
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat.rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return True


def cluster_dir(root: Path) -> Path:
    return root / "_cluster"


def _group_dir(root: Path, kind: str, address: str) -> Path:
    return cluster_dir(root) / kind / address.replace(":", "_").replace("/", "_")


def register(root: Path, kind: str, address: str, key: str, member: Member) -> Path:
    directory = _group_dir(root, kind, address)
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{key}.json"
    write_atomically(path, json.dumps(asdict(member)))
    return path


def members(root: Path, kind: str, address: str) -> dict[str, Member]:
    """Live members of a group, by key."""
    directory = _group_dir(root, kind, address)
    found: dict[str, Member] = {}
    if not directory.is_dir():
        return found
    for path in sorted(directory.glob("*.json")):
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        member = Member(**data)
        if pid_alive(member.pid):
            found[path.stem] = member
    return found


def native_address(master_addr: str, master_port: int) -> str:
    return f"{master_addr}:{master_port}"

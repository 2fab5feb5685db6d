"""The fake /proc of a simulated node: meminfo follows the engines running on it.

On a Spark the GPU and the OS share one memory, so every engine's budget (weights share,
KV cache, activations) comes straight out of MemAvailable.
"""

import json
from pathlib import Path

from sparksim.files import write_atomically
from sparksim.host.node import NodeInfo
from sparksim.host.wedge import boot_id, wedge
from sparksim.rendezvous import pid_alive

OS_RESIDENT_GIB = 3.5  # desktop off (seed 004 freed ~0.8 GB by disabling GDM)
KIB_PER_GIB = 1024 * 1024


def proc_dir(node: NodeInfo) -> Path:
    return Path(node.sim_dir) / "proc"


def budgets_dir(node: NodeInfo) -> Path:
    return proc_dir(node) / ".budgets"


def record_budget(node: NodeInfo, pid: int, gib: float) -> None:
    directory = budgets_dir(node)
    directory.mkdir(parents=True, exist_ok=True)
    write_atomically(directory / f"{pid}.json", json.dumps({"pid": pid, "gib": gib}))
    refresh_meminfo(node)


def drop_budget(node: NodeInfo, pid: int) -> None:
    (budgets_dir(node) / f"{pid}.json").unlink(missing_ok=True)
    refresh_meminfo(node)


def engine_budgets(node: NodeInfo) -> dict[int, float]:
    """pid -> GiB of every engine process alive on the node."""
    budgets: dict[int, float] = {}
    directory = budgets_dir(node)
    for path in directory.glob("*.json") if directory.is_dir() else []:
        try:
            data = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError):
            continue
        if pid_alive(int(data["pid"])):
            budgets[int(data["pid"])] = float(data["gib"])
        else:
            path.unlink(missing_ok=True)
    return budgets


def engines_gib(node: NodeInfo) -> float:
    return sum(engine_budgets(node).values())


def refresh_meminfo(node: NodeInfo) -> None:
    total_kib = int(node.memory_gib * KIB_PER_GIB)
    budgets = engine_budgets(node)
    used_kib = int((OS_RESIDENT_GIB + sum(budgets.values())) * KIB_PER_GIB)
    available_kib = max(0, total_kib - used_kib)
    free_kib = max(0, available_kib - 2 * KIB_PER_GIB)
    lines = [
        ("MemTotal", total_kib), ("MemFree", free_kib), ("MemAvailable", available_kib),
        ("Buffers", 262_144), ("Cached", 2 * KIB_PER_GIB), ("SwapCached", 0),
        ("SwapTotal", 16 * KIB_PER_GIB), ("SwapFree", 16 * KIB_PER_GIB),
        ("Shmem", 131_072), ("HugePages_Total", 0),
    ]
    text = "".join(
        f"{name + ':':<16}{value:>8}" + ("" if name.startswith("HugePages") else " kB") + "\n"
        for name, value in lines
    )
    path = proc_dir(node) / "meminfo"
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomically(path, text)
    if available_kib == 0:
        wedge(node, list(budgets))  # no OOM kill on a Spark: it stops answering


def write_proc_tree(node: NodeInfo) -> None:
    compaction = proc_dir(node) / "sys" / "vm" / "compaction_proactiveness"
    compaction.parent.mkdir(parents=True, exist_ok=True)
    # 0 is the Spark RoCE prerequisite (non-zero was linked to kernel crashes under RoCE).
    compaction.write_text(f"{node.faults.get('compaction_proactiveness', 0)}\n")
    boot_id(node)
    refresh_meminfo(node)

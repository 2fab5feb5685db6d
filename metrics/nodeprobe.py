"""The node probe: one read-only bash line run over the node's transport, and the parse of
its output into a reading (pure). /proc and /sys are read through SPARK_PROCFS/SPARK_SYSFS
so simulated Sparks answer the same way (docs/runtime-contract.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from metrics.parsing import counter_delta

GPU_FIELDS = "utilization.gpu,power.draw,temperature.gpu"
# RoCE port counters count 4-octet words (IB spec), not bytes.
ROCE_WORD_BYTES = 4
KIB = 1024
GIB = 1024**3

# One bash per node, one process tree: files are read with bash builtins (`read`), not
# cat/head/$(cat) (a fork each, 18 a probe before), so the probe's only children are
# `timeout` and `nvidia-smi`. The output is what cat/head printed.
PROBE_COMMAND = (
    'P="${SPARK_PROCFS:-/proc}"; S="${SPARK_SYSFS:-/sys}"; '
    'echo @meminfo; while IFS= read -r l || [ -n "$l" ]; do printf "%s\\n" "$l"; done < "$P/meminfo"; '
    # A simulated Spark has no stat of its own: its CPU is this machine's.
    'echo @stat; l=; { IFS= read -r l < "$P/stat"; } 2>/dev/null || IFS= read -r l < /proc/stat; '
    'printf "%s\\n" "$l"; '
    # nvidia-smi can hang on a wedged GPU: bounded on the node itself.
    f"echo @gpu; timeout -k 1 3 nvidia-smi --query-gpu={GPU_FIELDS} --format=csv,noheader,nounits 2>/dev/null; "
    'echo @roce; for f in "$S"/class/infiniband/*/ports/*/counters/port_xmit_data '
    '"$S"/class/infiniband/*/ports/*/counters/port_rcv_data; do '
    'v=; [ -r "$f" ] && { IFS= read -r v < "$f" || [ -n "$v" ]; } && printf "%s %s\\n" "$f" "$v"; done; true'
)


@dataclass
class NodeReading:
    at: float
    mem_available_kib: float | None = None
    swap_total_kib: float | None = None
    swap_free_kib: float | None = None
    cpu_total: float | None = None  # jiffies since boot
    cpu_idle: float | None = None
    gpu: dict[str, float] = field(default_factory=dict)
    roce: dict[str, dict[str, float]] = field(default_factory=dict)  # device -> counter -> words

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> NodeReading:
        return cls(**data)


def _number(text: str) -> float | None:
    try:
        return float(text.strip())
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def parse_probe_output(lines: list[str], *, at: float) -> NodeReading:
    reading = NodeReading(at=at)
    section = ""
    for line in lines:
        if line.startswith("@"):
            section = line[1:].strip()
            continue
        if section == "meminfo":
            name, _, rest = line.partition(":")
            value = _number(rest.replace("kB", ""))
            if name == "MemAvailable":
                reading.mem_available_kib = value
            elif name == "SwapTotal":
                reading.swap_total_kib = value
            elif name == "SwapFree":
                reading.swap_free_kib = value
        elif section == "stat" and line.startswith("cpu "):
            jiffies = [float(part) for part in line.split()[1:]]
            reading.cpu_total = sum(jiffies)
            # idle + iowait
            reading.cpu_idle = jiffies[3] + (jiffies[4] if len(jiffies) > 4 else 0.0)
        elif section == "gpu" and line.strip():
            parts = line.split(",")
            if len(parts) == 3 and not reading.gpu:
                for key, part in zip(("util", "power", "temp"), parts, strict=True):
                    value = _number(part)
                    if value is not None:
                        reading.gpu[key] = value
        elif section == "roce" and line.strip():
            path, _, value_text = line.rpartition(" ")
            parts = path.split("/")
            value = _number(value_text)
            if value is None or "infiniband" not in parts:
                continue
            device = parts[parts.index("infiniband") + 1]
            reading.roce.setdefault(device, {})[parts[-1]] = reading.roce.get(device, {}).get(parts[-1], 0.0) + value
    return reading


def node_figures(previous: NodeReading | None, current: NodeReading) -> dict[str, float]:
    figures: dict[str, float] = {}
    if current.mem_available_kib is not None:
        figures["mem_avail_gib"] = current.mem_available_kib * KIB / GIB
    if current.swap_total_kib is not None and current.swap_free_kib is not None:
        figures["swap_used_gib"] = max(0.0, current.swap_total_kib - current.swap_free_kib) * KIB / GIB
    for key, name in (("util", "gpu_util_pct"), ("power", "gpu_power_w"), ("temp", "gpu_temp_c")):
        if key in current.gpu:
            figures[name] = current.gpu[key]
    if previous is None or current.at <= previous.at:
        return figures
    seconds = current.at - previous.at
    if None not in (previous.cpu_total, previous.cpu_idle, current.cpu_total, current.cpu_idle):
        total = float(current.cpu_total or 0) - float(previous.cpu_total or 0)
        idle = float(current.cpu_idle or 0) - float(previous.cpu_idle or 0)
        if total > 0:
            figures["cpu_pct"] = max(0.0, min(100.0, 100.0 * (total - idle) / total))
    tx_total = rx_total = 0.0
    for device, counters in current.roce.items():
        before = previous.roce.get(device, {})
        tx = counter_delta(before.get("port_xmit_data"), counters.get("port_xmit_data", 0.0)) * ROCE_WORD_BYTES / seconds
        rx = counter_delta(before.get("port_rcv_data"), counters.get("port_rcv_data", 0.0)) * ROCE_WORD_BYTES / seconds
        figures[f"roce_tx_Bps:{device}"] = tx
        figures[f"roce_rx_Bps:{device}"] = rx
        tx_total += tx
        rx_total += rx
    if current.roce:
        figures["roce_tx_Bps"] = tx_total
        figures["roce_rx_Bps"] = rx_total
    return figures

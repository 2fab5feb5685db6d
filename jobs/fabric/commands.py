"""The command lines the fabric checks run on nodes, and what a node's network report says
about its RoCE devices. Pure: every value reaching a shell is quoted."""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

# perftest's own default port; one job's runs take consecutive ports from here, so a
# server still listening from an earlier pair can never answer a later pair's client.
DEFAULT_BASE_PORT = 18515
READY_MARKER = "Waiting for client to connect"
# The references' safe sweep (the playbook's 16 GB size allocates ~32 GB per node and can
# freeze a Spark): 512 MiB to 4 GiB, doubling.
SAFE_MIN_BYTES = 512 * 1024**2
SAFE_MAX_BYTES = 4 * 1024**3
COLLECTIVES = {"all_reduce": "all_reduce_perf", "all_gather": "all_gather_perf"}
PERFTEST_TOOLS = ("ib_write_lat", "ib_read_lat", "ib_send_lat", "ib_write_bw")


def perftest_server(tool: str, *, device: str, gid_index: int | None, port: int, extra: Sequence[str] = ()) -> str:
    parts = [tool, "-d", device, *(["-x", str(gid_index)] if gid_index is not None else []), *extra,
             "-p", str(port), "-F"]
    return " ".join(shlex.quote(part) for part in parts)


def perftest_client(tool: str, *, device: str, gid_index: int | None, port: int, server_ip: str,
                    extra: Sequence[str] = ()) -> str:
    return perftest_server(tool, device=device, gid_index=gid_index, port=port, extra=extra) + " " + shlex.quote(
        server_ip)


def latency_extra(size: int, iterations: int) -> list[str]:
    return ["-s", str(size), "-n", str(iterations)]


BANDWIDTH_EXTRA = ["--report_gbits"]


def mpirun_command(*, collective: str, hosts: Sequence[str], env: Mapping[str, str], min_bytes: int,
                   max_bytes: int) -> str:
    """nccl-tests over Open MPI, as NVIDIA's NCCL playbook runs it from the first node."""
    parts: list[str] = ["mpirun", "-np", str(len(hosts)), "-H", ",".join(f"{host}:1" for host in hosts),
                        "--mca", "plm_rsh_agent", "ssh -o BatchMode=yes -o ConnectTimeout=10"]
    for key, value in env.items():
        parts += ["-x", f"{key}={value}"]
    parts += [COLLECTIVES[collective], "-b", str(min_bytes), "-e", str(max_bytes), "-f", "2", "-g", "1"]
    return " ".join(shlex.quote(part) for part in parts)


def preflight_script(tools: Sequence[str], devices: Sequence[str]) -> str:
    """Read-only: which tools are missing, who holds the GPU, each device's port state."""
    lines = [f"command -v {shlex.quote(tool)} >/dev/null 2>&1 || echo MISSING {shlex.quote(tool)}" for tool in tools]
    lines.append("nvidia-smi --query-compute-apps=pid,process_name --format=csv,noheader 2>/dev/null"
                 " | sed -n 's/^\\(.\\)/GPU \\1/p'")
    for device in devices:
        quoted = shlex.quote(device)
        lines.append(f"echo PORT {quoted} \"$(cat \"${{SPARK_SYSFS:-/sys}}/class/infiniband/\"{quoted}"
                     "/ports/1/state 2>/dev/null || echo MISSING)\"")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Preflight:
    missing: tuple[str, ...]
    gpu_processes: tuple[str, ...]
    ports: Mapping[str, str]  # device -> state text ("4: ACTIVE", "1: DOWN", "MISSING")

    def down(self) -> list[str]:
        return [device for device, state in self.ports.items() if not state.endswith("ACTIVE")]


def parse_preflight(lines: Sequence[str]) -> Preflight:
    missing: list[str] = []
    gpu: list[str] = []
    ports: dict[str, str] = {}
    for line in lines:
        if line.startswith("MISSING "):
            missing.append(line.split(" ", 1)[1].strip())
        elif line.startswith("GPU "):
            gpu.append(line[4:].strip())
        elif line.startswith("PORT "):
            _, device, *state = line.split()
            ports[device] = " ".join(state)
    return Preflight(tuple(missing), tuple(gpu), ports)


def preflight_problems(node: str, found: Preflight, *, required_devices: Sequence[str]) -> list[str]:
    problems = [f"{tool} is not installed on {node} (not on its PATH)" for tool in found.missing]
    for process in found.gpu_processes:
        pid, _, name = process.partition(",")
        problems.append(f"{node} is busy: its GPU is in use by pid {pid.strip()} ({name.strip() or '?'}); "
                        "a fabric test needs the node to itself")
    for device in required_devices:
        state = found.ports.get(device, "MISSING")
        if state == "MISSING":
            problems.append(f"{node} has no RoCE device {device}")
        elif not state.endswith("ACTIVE"):
            problems.append(f"link down: {device} on {node} is {state.split(':')[-1].strip()}, not ACTIVE")
    return problems


def device_ipv4(report: Mapping[str, Any], device: str) -> str | None:
    for entry in report.get("devices") or []:
        if isinstance(entry, Mapping) and entry.get("name") == device and entry.get("ipv4"):
            return str(entry["ipv4"]).split("/")[0]
    return None


def device_by_ipv4(report: Mapping[str, Any], address: str) -> str | None:
    for entry in report.get("devices") or []:
        if isinstance(entry, Mapping) and str(entry.get("ipv4") or "").split("/")[0] == address:
            return str(entry["name"])
    return None


def linked_devices(report: Mapping[str, Any], peer: str) -> list[tuple[str, str]]:
    """(local device, peer IP) of every link to `peer` the network check saw pass its ping."""
    return [(str(link["device"]), str(link["peer_ip"])) for link in report.get("links") or []
            if isinstance(link, Mapping) and link.get("peer") == peer and link.get("ping_ok")]

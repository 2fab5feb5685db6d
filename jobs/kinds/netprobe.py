"""Network check logic without I/O (the network.sh checks of the Spark playbooks):
the read-only probe script, parsing its output, GID index, subnet pairing, ping commands,
per-link verdicts and the report format of docs/runtime-contract.md."""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

IPV4_MAPPED_GID_PREFIX = "0000:0000:0000:0000:0000:ffff:"
WANT_MTU = 9000

# Read-only: it only reads /sys, /proc and asks tools for versions. Tab-separated records:
#   K <key> <value> | D <device> <key> <value> | G <device> <index> <type> <gid>
PROBE_SCRIPT = r"""
set -u
SYS=${SPARK_SYSFS:-/sys}
PROC=${SPARK_PROCFS:-/proc}
rec() { local IFS=$'\t'; printf '%s\n' "$*"; }
rec K kernel "$(uname -r)"
rec K driver "$(nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n1 | tr -d ' ')"
rec K compaction "$(cat "$PROC/sys/vm/compaction_proactiveness" 2>/dev/null)"
rec K mem_total_kib "$(awk '/^MemTotal:/ {print $2}' "$PROC/meminfo" 2>/dev/null)"
rec K mem_available_kib "$(awk '/^MemAvailable:/ {print $2}' "$PROC/meminfo" 2>/dev/null)"
for dev_path in "$SYS"/class/infiniband/*; do
  [ -d "$dev_path" ] || continue
  dev=$(basename "$dev_path")
  port="$dev_path/ports/1"
  netdev=$(ls "$dev_path/device/net" 2>/dev/null | head -n1)
  rec D "$dev" netdev "$netdev"
  rec D "$dev" fw_ver "$(cat "$dev_path/fw_ver" 2>/dev/null)"
  rec D "$dev" port_state "$(cat "$port/state" 2>/dev/null)"
  rec D "$dev" rate "$(cat "$port/rate" 2>/dev/null)"
  if [ -n "$netdev" ]; then
    rec D "$dev" operstate "$(cat "$SYS/class/net/$netdev/operstate" 2>/dev/null)"
    rec D "$dev" mtu "$(cat "$SYS/class/net/$netdev/mtu" 2>/dev/null)"
    rec D "$dev" speed "$(cat "$SYS/class/net/$netdev/speed" 2>/dev/null)"
    rec D "$dev" ipv4 "$(ip -o -4 addr show dev "$netdev" 2>/dev/null | awk '{print $4; exit}')"
  fi
  for type_path in "$port"/gid_attrs/types/*; do
    [ -f "$type_path" ] || continue
    index=$(basename "$type_path")
    rec G "$dev" "$index" "$(cat "$type_path" 2>/dev/null)" "$(cat "$port/gids/$index" 2>/dev/null)"
  done
done
"""


@dataclass
class DeviceProbe:
    name: str
    netdev: str = ""
    fw_ver: str = ""
    port_state: str = ""
    operstate: str = ""
    mtu: int | None = None
    speed_mbps: int | None = None
    ipv4: str = ""
    gids: dict[int, tuple[str, str]] = field(default_factory=dict)  # index -> (type, gid)

    @property
    def gid_index(self) -> int | None:
        return roce_v2_ipv4_gid_index(self.gids)

    @property
    def active(self) -> bool:
        return self.port_state.upper().endswith("ACTIVE")

    @property
    def up(self) -> bool:
        return self.active and self.operstate == "up"

    @property
    def ip(self) -> str:
        return self.ipv4.split("/")[0] if self.ipv4 else ""

    @property
    def network(self) -> ipaddress.IPv4Network | None:
        try:
            return ipaddress.IPv4Interface(self.ipv4).network if self.ipv4 else None
        except ValueError:
            return None


@dataclass
class NodeProbe:
    node: str
    kernel: str = ""
    driver: str = ""
    compaction: int | None = None
    mem_total_kib: int | None = None
    mem_available_kib: int | None = None
    devices: list[DeviceProbe] = field(default_factory=list)


def _int(value: str) -> int | None:
    try:
        return int(value.strip())
    except (ValueError, AttributeError):
        return None


def roce_v2_ipv4_gid_index(gids: Mapping[int, tuple[str, str]]) -> int | None:
    """The lowest index whose type is "RoCE v2" and whose GID is IPv4-mapped (never a
    hard-coded 3: extra IPv6 addresses push it down; seed 003 found 11)."""
    for index in sorted(gids):
        kind, gid = gids[index]
        if kind.strip() == "RoCE v2" and gid.strip().lower().startswith(IPV4_MAPPED_GID_PREFIX):
            return index
    return None


def parse_probe(node: str, output: str) -> NodeProbe:
    probe = NodeProbe(node=node)
    devices: dict[str, DeviceProbe] = {}
    for line in output.splitlines():
        parts = line.split("\t")
        if parts[0] == "K" and len(parts) >= 3:
            key, value = parts[1], parts[2]
            if key in ("kernel", "driver"):
                setattr(probe, key, value.strip())
            elif key in ("compaction", "mem_total_kib", "mem_available_kib"):
                setattr(probe, key, _int(value))
        elif parts[0] == "D" and len(parts) >= 4:
            device = devices.setdefault(parts[1], DeviceProbe(name=parts[1]))
            key, value = parts[2], parts[3].strip()
            if key in ("mtu", "speed"):
                number = _int(value)
                setattr(device, "mtu" if key == "mtu" else "speed_mbps", number if number and number > 0 else None)
            elif key == "port_state":
                device.port_state = value.split(":", 1)[-1].strip()
            elif key in ("netdev", "fw_ver", "operstate", "ipv4"):
                setattr(device, key, value)
        elif parts[0] == "G" and len(parts) >= 5:
            device = devices.setdefault(parts[1], DeviceProbe(name=parts[1]))
            index = _int(parts[2])
            if index is not None:
                device.gids[index] = (parts[3], parts[4])
    probe.devices = sorted(devices.values(), key=lambda d: d.name)
    return probe


@dataclass(frozen=True)
class LinkPair:
    node: str
    device: DeviceProbe
    peer: str
    peer_device: DeviceProbe


def pair_links(probes: Sequence[NodeProbe]) -> list[LinkPair]:
    """Interfaces of different nodes on one subnet are cabled together. Where a subnet
    holds several devices (both PCIe halves of a port), the same device name pairs with
    itself; a cross-connect (different names) is still paired, and judged below."""
    pairs: list[LinkPair] = []
    for probe in probes:
        for peer in probes:
            if peer.node == probe.node:
                continue
            for device in probe.devices:
                net = device.network
                if net is None:
                    continue
                same_subnet = [d for d in peer.devices if d.network == net]
                if not same_subnet:
                    continue
                match = next((d for d in same_subnet if d.name == device.name), same_subnet[0])
                pairs.append(LinkPair(probe.node, device, peer.node, match))
    return pairs


def ping_size(mtu: int | None) -> int:
    """ICMP payload that fills the MTU: minus 20 (IPv4) and 8 (ICMP) header bytes."""
    return max((mtu or 1500) - 28, 0)


def ping_command(pair: LinkPair) -> str:
    size = ping_size(min(pair.device.mtu or 1500, pair.peer_device.mtu or 1500))
    return (
        f"ping -M do -s {size} -c 3 -W 2 -I {shlex.quote(pair.device.netdev)} {shlex.quote(pair.peer_device.ip)}"
    )


def link_verdict(pair: LinkPair, ping_ok: bool, ping_detail: str) -> dict[str, Any]:
    """network.sh verify: both sides up and ACTIVE, equal speed and MTU (warn below 9000),
    same GID index on both ends, jumbo ping through."""
    d, p = pair.device, pair.peer_device
    problems: list[str] = []
    warnings: list[str] = []
    if not d.up or not p.up:
        problems.append(f"port not up/ACTIVE ({d.name}: {d.port_state or '?'}/{d.operstate or '?'}, "
                        f"{pair.peer} {p.name}: {p.port_state or '?'}/{p.operstate or '?'})")
    if d.name != p.name:
        problems.append(f"cross-connected: {d.name} is cabled to {pair.peer}'s {p.name}")
    if d.gid_index is None or p.gid_index is None:
        problems.append("no RoCE v2 IPv4-mapped GID")
    elif d.gid_index != p.gid_index:
        warnings.append(f"GID index differs ({d.gid_index} vs {p.gid_index})")
    if d.speed_mbps != p.speed_mbps:
        warnings.append(f"speed differs ({d.speed_mbps} vs {p.speed_mbps} Mb/s)")
    if d.mtu != p.mtu:
        warnings.append(f"MTU differs ({d.mtu} vs {p.mtu})")
    elif d.mtu != WANT_MTU:
        warnings.append(f"MTU {d.mtu}, want {WANT_MTU}")
    if not ping_ok:
        problems.append(f"jumbo ping failed: {ping_detail}")
    verdict = "fail" if problems else "warn" if warnings else "ok"
    detail = "; ".join(problems + warnings) or f"jumbo ping {ping_size(min(d.mtu or 0, p.mtu or 0))} B ok"
    return {
        "peer": pair.peer, "device": d.name, "netdev": d.netdev, "local_ip": d.ip, "peer_ip": p.ip,
        "peer_device": p.name, "mtu": d.mtu, "peer_mtu": p.mtu, "speed_mbps": d.speed_mbps,
        "ping_ok": ping_ok, "verdict": verdict, "detail": detail,
    }


def device_report(device: DeviceProbe) -> dict[str, Any]:
    return {
        "name": device.name, "netdev": device.netdev, "port_state": device.port_state,
        "operstate": device.operstate, "speed_mbps": device.speed_mbps, "mtu": device.mtu,
        "ipv4": device.ipv4, "gid_index": device.gid_index, "fw_ver": device.fw_ver,
    }


def build_report(probe: NodeProbe, links: Sequence[dict[str, Any]], checked_at: str, had_peers: bool) -> dict[str, Any]:
    """The report lanes' plans read (docs/runtime-contract.md)."""
    good_links = [link for link in links if link["verdict"] != "fail"]
    if had_peers:
        usable = sorted({link["device"] for link in good_links})
        eth_link = next((link for link in good_links), None)
        eth_if, fabric_ip = (eth_link["netdev"], eth_link["local_ip"]) if eth_link else ("", "")
    else:  # a single-node lane: every ACTIVE device with an address is usable
        ready = [d for d in probe.devices if d.up and d.ip]
        usable = [d.name for d in ready]
        eth_if, fabric_ip = (ready[0].netdev, ready[0].ip) if ready else ("", "")
    gid_indexes = sorted({d.gid_index for d in probe.devices if d.name in usable and d.gid_index is not None})
    notes: list[str] = []
    if probe.compaction not in (0, None):
        notes.append(f"vm.compaction_proactiveness={probe.compaction} (want 0: linked to kernel crashes under RoCE)")
    if len(gid_indexes) > 1:
        notes.append(f"usable devices disagree on the GID index: {gid_indexes}")
    verdicts = [link["verdict"] for link in links]
    if not usable:
        verdict = "fail"
        notes.append("no usable RoCE device")
    elif "fail" in verdicts or "warn" in verdicts or notes:
        verdict = "warn"
    else:
        verdict = "ok"
    return {
        "checked_at": checked_at,
        "kernel": probe.kernel,
        "driver": probe.driver,
        "compaction_proactiveness": probe.compaction,
        "mem_total_kib": probe.mem_total_kib,
        "mem_available_kib": probe.mem_available_kib,
        "devices": [device_report(d) for d in probe.devices],
        "eth_if": eth_if,
        "fabric_ip": fabric_ip,
        "ib_hca": usable,
        "gid_index": gid_indexes[0] if gid_indexes else None,
        "links": list(links),
        "notes": notes,
        "verdict": verdict,
    }


def link_warnings(links: Sequence[dict[str, Any]]) -> list[str]:
    """What a link verdict other than "ok" says, one line per link (the step's and the job's reason)."""
    return [f"{link['device']} → {link['peer']}: {link['verdict']} ({link['detail']})"
            for link in links if link["verdict"] != "ok"]


def version_mismatches(probes: Sequence[NodeProbe]) -> list[str]:
    """verify: kernel, driver and firmware must match on every node."""
    problems = []
    for label, values in (
        ("kernel", {p.node: p.kernel for p in probes}),
        ("driver", {p.node: p.driver for p in probes}),
        ("firmware", {p.node: ",".join(sorted({d.fw_ver for d in p.devices})) for p in probes}),
    ):
        if len(set(values.values())) > 1:
            problems.append(f"{label} differs: " + ", ".join(f"{n}={v}" for n, v in sorted(values.items())))
    return problems

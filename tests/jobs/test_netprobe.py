"""Network check logic without I/O: probe parsing, the computed GID index, subnet pairing,
jumbo ping size, per-link verdicts and the report."""

from __future__ import annotations

from jobs.kinds.netprobe import (
    IPV4_MAPPED_GID_PREFIX,
    build_report,
    link_verdict,
    pair_links,
    parse_probe,
    ping_command,
    roce_v2_ipv4_gid_index,
    version_mismatches,
)
from jobs.kinds.network import parse_pings, ping_script

LINK_LOCAL = "fe80:0000:0000:0000:4ebb:47ff:fe0b:0000"


def probe_output(host: int, *, mtu: int = 9000, state: str = "4: ACTIVE", gid_index: int = 3, kernel: str = "6.11.0") -> str:
    lines = [f"K\tkernel\t{kernel}", "K\tdriver\t580.95.05", "K\tcompaction\t0",
             "K\tmem_total_kib\t134217728", "K\tmem_available_kib\t120000000"]
    for dev, netdev, subnet, offset in (("rocep1s0f0", "enp1s0f0np0", 100, 0), ("roceP2p1s0f0", "enP2p1s0f0np0", 100, 100)):
        ip = f"192.168.{subnet}.{host + offset}"
        lines += [f"D\t{dev}\tnetdev\t{netdev}", f"D\t{dev}\tfw_ver\t28.45.1200", f"D\t{dev}\tport_state\t{state}",
                  f"D\t{dev}\toperstate\tup", f"D\t{dev}\tmtu\t{mtu}", f"D\t{dev}\tspeed\t200000",
                  f"D\t{dev}\tipv4\t{ip}/24",
                  f"G\t{dev}\t0\tIB/RoCE v1\t{LINK_LOCAL}", f"G\t{dev}\t1\tRoCE v2\t{LINK_LOCAL}"]
        a, b = (host + offset).to_bytes(1, "big").hex(), f"{subnet:02x}"
        mapped = f"{IPV4_MAPPED_GID_PREFIX}c0a8:{b}{a}"
        lines += [f"G\t{dev}\t{gid_index - 1}\tIB/RoCE v1\t{mapped}", f"G\t{dev}\t{gid_index}\tRoCE v2\t{mapped}"]
    return "\n".join(lines)


def test_gid_index_is_the_lowest_ipv4_mapped_roce_v2_entry():
    gids = {0: ("IB/RoCE v1", LINK_LOCAL), 1: ("RoCE v2", LINK_LOCAL),
            10: ("IB/RoCE v1", IPV4_MAPPED_GID_PREFIX + "c0a8:640b"), 11: ("RoCE v2", IPV4_MAPPED_GID_PREFIX + "c0a8:640b")}
    assert roce_v2_ipv4_gid_index(gids) == 11  # seed 003 found it at 11: never hard-code 3
    assert roce_v2_ipv4_gid_index({1: ("RoCE v2", LINK_LOCAL)}) is None


def test_parse_probe_reads_devices_and_host_facts():
    probe = parse_probe("spark1", probe_output(11))
    assert probe.kernel == "6.11.0" and probe.compaction == 0 and probe.mem_available_kib == 120000000
    device = probe.devices[1]
    assert (device.name, device.netdev, device.port_state, device.mtu, device.speed_mbps) == (
        "rocep1s0f0", "enp1s0f0np0", "ACTIVE", 9000, 200000)
    assert device.ip == "192.168.100.11" and device.gid_index == 3


def test_pairing_matches_same_subnet_and_same_device_name():
    a, b = parse_probe("spark1", probe_output(11)), parse_probe("spark2", probe_output(12))
    pairs = [(p.node, p.device.name, p.peer, p.peer_device.name) for p in pair_links([a, b])]
    assert ("spark1", "rocep1s0f0", "spark2", "rocep1s0f0") in pairs
    assert ("spark1", "roceP2p1s0f0", "spark2", "roceP2p1s0f0") in pairs
    assert len(pairs) == 4


def test_jumbo_ping_is_mtu_minus_28_with_dont_fragment():
    a, b = parse_probe("spark1", probe_output(11)), parse_probe("spark2", probe_output(12))
    pair = next(p for p in pair_links([a, b]) if p.device.name == "rocep1s0f0" and p.node == "spark1")
    assert ping_command(pair) == "ping -M do -s 8972 -c 3 -W 2 -I enp1s0f0np0 192.168.100.12"


def test_link_verdicts_ok_warn_fail():
    a, b = parse_probe("spark1", probe_output(11)), parse_probe("spark2", probe_output(12, mtu=1500))
    pair = pair_links([a, b])[0]
    warn = link_verdict(pair, True, "")
    assert warn["verdict"] == "warn" and "MTU differs" in warn["detail"]
    fail = link_verdict(pair, False, "ping: local error: message too long, mtu=1500")
    assert fail["verdict"] == "fail" and "message too long" in fail["detail"]
    down = parse_probe("spark2", probe_output(12, state="1: DOWN"))
    assert link_verdict(pair_links([a, down])[0], True, "")["verdict"] == "fail"


def test_report_has_the_documented_shape():
    a, b = parse_probe("spark1", probe_output(11)), parse_probe("spark2", probe_output(12))
    links = [link_verdict(p, True, "") for p in pair_links([a, b]) if p.node == "spark1"]
    report = build_report(a, links, "2026-11-29T18:00:00Z", had_peers=True)
    assert report["verdict"] == "ok" and report["gid_index"] == 3
    assert report["eth_if"] in ("enp1s0f0np0", "enP2p1s0f0np0") and report["fabric_ip"].startswith("192.168.100.")
    assert sorted(report["ib_hca"]) == ["roceP2p1s0f0", "rocep1s0f0"]
    assert {"checked_at", "kernel", "driver", "compaction_proactiveness", "mem_total_kib", "mem_available_kib",
            "devices", "links"} <= set(report)


def test_a_node_without_good_links_fails():
    a, b = parse_probe("spark1", probe_output(11)), parse_probe("spark2", probe_output(12))
    links = [link_verdict(p, False, "100% packet loss") for p in pair_links([a, b]) if p.node == "spark1"]
    report = build_report(a, links, "t", had_peers=True)
    assert report["verdict"] == "fail" and report["ib_hca"] == []


def test_versions_must_match_between_nodes():
    a, b = parse_probe("spark1", probe_output(11)), parse_probe("spark2", probe_output(12, kernel="6.8.0"))
    assert version_mismatches([a, b]) == ["kernel differs: spark1=6.11.0, spark2=6.8.0"]


def test_ping_script_results_are_parsed_per_link():
    a, b = parse_probe("spark1", probe_output(11)), parse_probe("spark2", probe_output(12))
    own = [p for p in pair_links([a, b]) if p.node == "spark1"]
    assert ping_script(own).count("ping -M do") == 2
    assert parse_pings(["PING\t0\t0\trtt ok", "PING\t1\t1\t100% packet loss"], 2) == {
        0: (True, "rtt ok"), 1: (False, "100% packet loss")}
    assert parse_pings([], 1) == {0: (False, "no answer from the ping script")}

"""Host stand-ins: the fake /sys tree, nvidia-smi, ibdev2netdev, ip, ping, perftest, faults."""

import json
import re
import subprocess
import sys
from pathlib import Path

from sparksim.cluster import cluster_up
from sparksim.host.node import NodeInfo, load_node
from sparksim.host.sysfs import roce_v2_ipv4_gid_index
from tests.sparksim.conftest import node_shell

# network.sh's rule, as a probe script would run it on a node.
GID_PROBE = r"""
port=${SPARK_SYSFS:-/sys}/class/infiniband/$1/ports/1
for gid in $(ls $port/gids | sort -n); do
  type=$(cat $port/gid_attrs/types/$gid 2>/dev/null)
  value=$(cat $port/gids/$gid)
  if [ "$type" = "RoCE v2" ] && [ "${value#0000:0000:0000:0000:0000:ffff:}" != "$value" ]; then
    echo $gid; break
  fi
done
"""


def fault(node: NodeInfo, *arguments: str) -> None:
    subprocess.run([sys.executable, "-m", "sparksim", "fault", "--node-dir", node.sim_dir,
                    *arguments], check=True)


def gid_probe(node: NodeInfo, device: str) -> str:
    return node_shell(node, f"bash -s {device} <<'EOF'\n{GID_PROBE}\nEOF").stdout.strip()


def test_sysfs_has_four_active_roce_devices_at_200g(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    sysfs = Path(node.sim_dir) / "sys" / "class"
    devices = sorted(path.name for path in (sysfs / "infiniband").iterdir())
    assert devices == ["roceP2p1s0f0", "roceP2p1s0f1", "rocep1s0f0", "rocep1s0f1"]
    port = sysfs / "infiniband" / "rocep1s0f0" / "ports" / "1"
    assert (port / "state").read_text().strip() == "4: ACTIVE"
    assert (port / "rate").read_text().strip() == "200 Gb/sec (4X HDR)"
    assert (sysfs / "infiniband" / "rocep1s0f0" / "device" / "net" / "enp1s0f0np0" /
            "mtu").read_text().strip() == "9000"
    assert (sysfs / "net" / "enP2p1s0f1np1" / "operstate").read_text().strip() == "up"
    compaction = Path(node.sim_dir) / "proc" / "sys" / "vm" / "compaction_proactiveness"
    assert compaction.read_text().strip() == "0"


def test_gid_index_is_read_from_the_tree_and_moves_with_a_fault(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    assert gid_probe(node, "rocep1s0f0") == "3"
    assert roce_v2_ipv4_gid_index(node, "rocep1s0f0") == 3
    gid = (Path(node.sim_dir) / "sys/class/infiniband/rocep1s0f0/ports/1/gids/3").read_text()
    mapped = "".join(f"{int(octet):02x}" for octet in node.fabric_ip("enp1s0f0np0").split("."))
    assert gid.strip() == f"0000:0000:0000:0000:0000:ffff:{mapped[:4]}:{mapped[4:]}"
    fault(node, "gid-index", "roceP2p1s0f1", "11")  # seed 003 found it at 11
    assert gid_probe(node, "roceP2p1s0f1") == "11"
    assert gid_probe(node, "rocep1s0f0") == "3"


def test_nvidia_smi_ibdev2netdev_and_ip(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    smi = node_shell(node, "nvidia-smi --query-gpu=name,driver_version,utilization.gpu,"
                     "power.draw,temperature.gpu,memory.used,memory.total "
                     "--format=csv,noheader,nounits").stdout
    assert re.fullmatch(r"NVIDIA GB10, 580\.\d+\.\d+, \d+, [\d.]+, \d+, \[N/A\], \[N/A\]\n", smi)
    fault(node, "link-down", "rocep1s0f1")
    lines = node_shell(node, "ibdev2netdev").stdout.splitlines()
    assert lines[0] == "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)"
    assert lines[1] == "rocep1s0f1 port 1 ==> enp1s0f1np1 (Down)"
    address = node_shell(node, "ip -o -4 addr show dev enp1s0f0np0").stdout
    ip = re.escape(node.fabric_ip("enp1s0f0np0"))
    assert re.match(rf"\d+: enp1s0f0np0    inet {ip}/24 brd 192\.168\.100\.255 "
                    r"scope global enp1s0f0np0\\       valid_lft forever preferred_lft forever",
                    address)


def test_jumbo_ping_between_nodes_and_its_failures(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    peer = worker.fabric_ip("enp1s0f0np0")
    ping = f"ping -M do -s 8972 -c 3 -W 1 -I enp1s0f0np0 {peer}"
    ok = node_shell(head, ping)
    assert ok.returncode == 0 and "3 packets transmitted, 3 received, 0% packet loss" in ok.stdout
    other_subnet = node_shell(head, f"ping -c 1 -I enp1s0f0np0 {worker.fabric_ip('enp1s0f1np1')}")
    assert other_subnet.returncode == 1 and "100% packet loss" in other_subnet.stdout
    stranger = node_shell(head, "ping -c 1 -I enp1s0f0np0 192.168.100.250")
    assert stranger.returncode == 1
    fault(worker, "mtu", "enp1s0f0np0", "1500")
    assert "100% packet loss" in node_shell(head, ping).stdout  # dropped at the far end
    assert node_shell(head, f"ping -M do -s 1472 -c 1 -I enp1s0f0np0 {peer}").returncode == 0
    fault(head, "mtu", "enp1s0f0np0", "1500")
    local = node_shell(head, ping)
    assert local.returncode == 1 and "ping: local error: message too long, mtu=1500" in local.stdout
    fault(head, "clear")
    fault(worker, "clear")
    fault(worker, "link-down", "rocep1s0f0")
    assert node_shell(head, ping).returncode == 1
    fault(head, "link-down", "enp1s0f0np0")
    assert "Network is unreachable" in node_shell(head, ping).stderr


def test_slow_rtt_shows_in_ping_and_perftest(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    peer = worker.fabric_ip("enp1s0f0np0")

    def average_rtt() -> float:
        out = node_shell(head, f"ping -c 3 -I enp1s0f0np0 {peer}").stdout
        return float(re.search(r"= [\d.]+/([\d.]+)/", out).group(1))  # type: ignore[union-attr]

    def write_latency() -> float:
        out = node_shell(head, f"ib_write_lat -d rocep1s0f0 -x 3 -s 2 -n 10000 {peer}").stdout
        return float(out.strip().splitlines()[-2].split()[5])

    fast_rtt, fast_latency = average_rtt(), write_latency()
    assert fast_rtt < 1.0 and 2.9 < fast_latency < 3.5  # seed 003: write 2.93-3.49 us
    fault(head, "slow-rtt", "500")
    assert average_rtt() > fast_rtt + 0.4
    assert write_latency() > fast_latency + 200


def test_perftest_outputs_and_counters(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    peer = worker.fabric_ip("enp1s0f0np0")
    read = node_shell(head, f"ib_read_lat -d rocep1s0f0 {peer}").stdout
    assert "RDMA_Read Latency Test" in read and " GID index       : 3" in read
    assert 5.5 < float(read.strip().splitlines()[-2].split()[5]) < 6.5
    send = node_shell(head, f"ib_send_lat -d rocep1s0f0 {peer}").stdout
    assert "Send Latency Test" in send
    counter = Path(head.sim_dir) / "sys/class/infiniband/rocep1s0f0/ports/1/counters/port_xmit_data"
    before = int(counter.read_text())
    bandwidth = node_shell(head, f"ib_write_bw -d rocep1s0f0 -F --report_gbits {peer}").stdout
    average = float(bandwidth.strip().splitlines()[-2].split()[3])
    assert 106 < average < 108  # seed 003: 107.66 Gbit/s
    assert int(counter.read_text()) > before
    server = node_shell(worker, "ib_write_bw -d rocep1s0f0 -F --report_gbits")
    assert "Waiting for client to connect" in server.stdout
    fault(worker, "link-down", "rocep1s0f0")
    failed = node_shell(head, f"ib_write_lat -d rocep1s0f0 {peer}")
    assert failed.returncode == 1 and "Couldn't connect" in failed.stdout


def test_cluster_up_is_idempotent_and_keeps_faults(tmp_path: Path) -> None:
    root = tmp_path / "demo"
    command = [sys.executable, "-m", "sparksim", "cluster", "up", "--root", str(root), "--nodes",
               "spark1,spark2,spark3", "--base-address", "127.0.0.71", "--time-scale", "0.5"]
    described = json.loads(subprocess.run(command, capture_output=True, text=True,
                                          check=True).stdout)
    assert [(node["name"], node["address"]) for node in described] == [
        ("spark1", "127.0.0.71"), ("spark2", "127.0.0.72"), ("spark3", "127.0.0.73")]
    assert described[2]["fabric"]["enp1s0f0np0"] == "192.168.100.73"
    node = load_node(described[0]["sim_dir"])
    fault(node, "link-down", "rocep1s0f0")
    again = cluster_up(root, ["spark1", "spark2", "spark3"], "127.0.0.71", 0.5)
    assert again[0].faults == {"link_down": ["rocep1s0f0"]}
    state = Path(node.sim_dir) / "sys/class/infiniband/rocep1s0f0/ports/1/state"
    assert state.read_text().strip() == "1: DOWN"
    subprocess.run([sys.executable, "-m", "sparksim", "cluster", "down", "--root", str(root)],
                   check=True)


def test_fabric_addresses_stay_valid_for_high_host_numbers(tmp_path: Path) -> None:
    (node,) = cluster_up(tmp_path / "high", ["spark9"], base_address="127.0.0.201")
    assert node.fabric_ip("enp1s0f0np0") == "192.168.100.201"
    assert node.fabric_ip("enP2p1s0f0np0") == "192.168.100.101"
    assert gid_probe(node, "roceP2p1s0f0") == "3"

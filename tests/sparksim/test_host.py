"""Host stand-ins: the fake /sys tree, nvidia-smi, ibdev2netdev, ip, ping, perftest, faults."""

import json
import re
import subprocess
import sys
from pathlib import Path

from sparksim.cluster import cluster_up
from sparksim.host.node import NodeInfo, load_node
from sparksim.host.sysfs import roce_v2_ipv4_gid_index
from tests.sparksim.conftest import node_shell, wait_for

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


def perftest_pair(server: NodeInfo, client: NodeInfo, line: str, port: int = 18515) -> str:
    """perftest's way: the server listens on its TCP port first, the client connects to it;
    both print the result table. Returns the client's output."""
    prefix = (f"export PATH={server.sim_dir}/bin:$PATH SPARK_SYSFS={server.sim_dir}/sys; ")
    listening = subprocess.Popen(["bash", "-c", prefix + f"{line} -p {port}"], stdout=subprocess.PIPE, text=True)
    assert listening.stdout is not None
    for output in listening.stdout:
        if "Waiting for client to connect" in output:
            break
    peer = server.fabric_ip("enp1s0f0np0")
    answer = node_shell(client, f"{line} -p {port} {peer}").stdout
    rest, _ = listening.communicate(timeout=30)
    assert listening.returncode == 0 and answer.strip().splitlines()[-2] in rest
    return answer


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
        out = perftest_pair(worker, head, "ib_write_lat -d rocep1s0f0 -x 3 -s 2 -n 10000")
        return float(out.strip().splitlines()[-2].split()[5])

    fast_rtt, fast_latency = average_rtt(), write_latency()
    assert fast_rtt < 1.0 and 2.9 < fast_latency < 3.5  # seed 003: write 2.93-3.49 us
    fault(head, "slow-rtt", "500")
    assert average_rtt() > fast_rtt + 0.4
    assert write_latency() > fast_latency + 200


def test_perftest_outputs_and_counters(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    peer = worker.fabric_ip("enp1s0f0np0")
    read = perftest_pair(worker, head, "ib_read_lat -d rocep1s0f0")
    assert "RDMA_Read Latency Test" in read and " GID index       : 3" in read
    assert 5.5 < float(read.strip().splitlines()[-2].split()[5]) < 6.5
    send = perftest_pair(worker, head, "ib_send_lat -d rocep1s0f0")
    assert "Send Latency Test" in send
    counter = Path(head.sim_dir) / "sys/class/infiniband/rocep1s0f0/ports/1/counters/port_xmit_data"
    before = int(counter.read_text())
    bandwidth = perftest_pair(worker, head, "ib_write_bw -d rocep1s0f0 -F --report_gbits")
    average = float(bandwidth.strip().splitlines()[-2].split()[3])
    assert 106 < average < 108  # seed 003: 107.66 Gbit/s
    assert int(counter.read_text()) > before
    # No server listening on that port: the client cannot connect.
    alone = node_shell(head, f"ib_send_lat -d rocep1s0f0 -p 18999 {peer}")
    assert alone.returncode == 1 and "Couldn't connect to" in alone.stdout
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


def test_perftest_server_refuses_a_port_already_listening(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    prefix = f"export PATH={worker.sim_dir}/bin:$PATH SPARK_SYSFS={worker.sim_dir}/sys; "
    first = subprocess.Popen(["bash", "-c", prefix + "ib_send_lat -d rocep1s0f0 -p 18700"],
                             stdout=subprocess.PIPE, text=True)
    assert first.stdout is not None
    for output in first.stdout:
        if "Waiting" in output:
            break
    second = node_shell(worker, "ib_send_lat -d rocep1s0f0 -p 18700")
    assert second.returncode == 1 and "Couldn't listen to port 18700" in second.stdout
    node_shell(head, f"ib_send_lat -d rocep1s0f0 -p 18700 {worker.fabric_ip('enp1s0f0np0')}")
    first.communicate(timeout=30)


def test_rtt_rise_makes_each_measurement_slower(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    fault(head, "rtt-rise", "4")
    averages = [float(perftest_pair(worker, head, "ib_send_lat -d rocep1s0f0 -s 2 -n 1000")
                      .strip().splitlines()[-2].split()[5]) for _ in range(3)]
    assert averages[0] < averages[1] < averages[2]
    assert averages[2] - averages[0] > 3.5  # 4 us more on this side per run: half of it shows one way


def mpirun_line(nodes: list[NodeInfo], env: str = "") -> str:
    hosts = ",".join(f"{node.fabric_ip('enp1s0f0np0')}:1" for node in nodes)
    return f"mpirun -np {len(nodes)} -H {hosts} {env} all_reduce_perf -b 512M -e 4G -f 2 -g 1"


def test_nccl_all_reduce_over_ib_reaches_seed_000_bandwidth(nodes: list[NodeInfo]) -> None:
    env = "-x NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0 -x NCCL_IB_GID_INDEX=3 -x NCCL_SOCKET_IFNAME=enp1s0f0np0"
    out = node_shell(nodes[0], mpirun_line(nodes, env)).stdout
    assert "NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE" in out and "via NET/IB/1" in out
    average = float(re.search(r"# Avg bus bandwidth\s*:\s*([\d.]+)", out).group(1))  # type: ignore[union-attr]
    assert 21.875 < average < 23.3  # over 175 Gb/s, seed 000: 185 Gb/s


def test_nccl_faults_half_link_socket_fallback_and_missing_binary(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    env = "-x NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0"
    fault(worker, "link-down", "roceP2p1s0f0")
    half = node_shell(head, mpirun_line(nodes, env)).stdout
    assert float(re.search(r"Avg bus bandwidth\s*:\s*([\d.]+)", half).group(1)) < 12  # type: ignore[union-attr]
    fault(worker, "link-down", "rocep1s0f0")
    socket = node_shell(head, mpirun_line(nodes, env)).stdout
    assert "NET/Socket : Using" in socket and "via NET/Socket/0" in socket
    fault(worker, "tool-missing", "all_reduce_perf")
    missing = node_shell(head, mpirun_line(nodes, env))
    assert missing.returncode == 1 and "Executable: all_reduce_perf\nNode: spark2" in missing.stderr
    assert not (Path(worker.sim_dir) / "bin" / "all_reduce_perf").exists()
    fault(worker, "tool-present", "all_reduce_perf")
    assert (Path(worker.sim_dir) / "bin" / "all_reduce_perf").exists()


def test_gpu_busy_shows_in_compute_apps(nodes: list[NodeInfo]) -> None:
    query = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader"
    assert node_shell(nodes[1], query).stdout == ""
    fault(nodes[1], "gpu-busy", "python3 train.py")
    pid, name, memory = node_shell(nodes[1], query).stdout.strip().split(", ")
    assert pid.isdigit() and name == "python3 train.py" and memory == "[N/A]"


# Every query form the portal sends (node probe, net probe, fabric check), the forms the tests
# and docs use, and the error cases: the node's sh script must answer each like the Python
# stand-in (`python -m sparksim tool nvidia-smi`), byte for byte, status included.
SMI_FORMS = [
    [], ["-L"],
    ["--query-gpu=utilization.gpu,power.draw,temperature.gpu", "--format=csv,noheader,nounits"],  # node probe
    ["--query-gpu=driver_version", "--format=csv,noheader"],  # net probe
    ["--query-compute-apps=pid,process_name", "--format=csv,noheader"],  # fabric check
    ["--query-compute-apps=pid,process_name,used_memory", "--format=csv,noheader"],
    ["--query-compute-apps=pid, name ,used_memory", "--format=csv"],
    ["--query-gpu=name,driver_version,utilization.gpu,power.draw,temperature.gpu,memory.used,memory.total",
     "--format=csv,noheader,nounits"],
    ["--query-gpu=name,utilization.gpu,power.draw,memory.free,uuid,index,pci.bus_id,compute_cap", "--format=csv"],
    ["--query-gpu=utilization.gpu,power.draw", "--format=csv,nounits"],
    ["--query-gpu", " power.draw , utilization.gpu"],
    ["--format=csv", "--query-gpu=temperature.gpu", "--format=csv,noheader"],
    ["--query-gpu=power.draw,fan.speed,clocks.sm", "--format=csv"],  # not a field: stderr, status 2
    ["--query-gpu=", "--format=csv"], ["--query-gpu=power.draw,", "--format=csv"],
    ["--query-compute-apps=pid", "--query-gpu=power.draw"],
]


def smi_answers(node: NodeInfo, argv: list[str]) -> tuple[tuple[int, str, str], tuple[int, str, str]]:
    python = subprocess.run([sys.executable, "-m", "sparksim", "tool", "nvidia-smi", "--node-dir", node.sim_dir,
                             *argv], capture_output=True, text=True, check=False)
    # No PATH: the script runs on shell builtins alone (no Python, no child process).
    script = subprocess.run([f"{node.sim_dir}/bin/nvidia-smi", *argv], capture_output=True, text=True,
                            env={"PATH": "/nonexistent"}, check=False)
    return ((python.returncode, python.stdout, python.stderr), (script.returncode, script.stdout, script.stderr))


def assert_smi_forms_match(node: NodeInfo) -> None:
    for argv in SMI_FORMS:
        python, script = smi_answers(node, argv)
        assert script == python, argv


def test_the_nvidia_smi_script_answers_every_query_form_like_the_python_stand_in(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    script = Path(node.sim_dir, "bin", "nvidia-smi").read_text()
    assert script.startswith("#!/bin/sh\n") and sys.executable not in script and "exec" not in script
    probe = SMI_FORMS[2]
    assert smi_answers(node, probe)[1] == (0, "0, 11.02, 38\n", "")
    assert smi_answers(node, SMI_FORMS[12])[1] == (2, "", 'Field "fan.speed" is not a valid field to query.\n')
    assert_smi_forms_match(node)
    # An engine's budget makes the GPU busy while its process lives: a zero budget does not,
    # a zombie does not, a dead process does not.
    budgets = Path(node.sim_dir) / "proc" / ".budgets"
    budgets.mkdir(parents=True, exist_ok=True)
    engine = subprocess.Popen(["sleep", "600"])
    try:
        budget = budgets / f"{engine.pid}.json"
        budget.write_text(json.dumps({"pid": engine.pid, "gib": 0.0}))
        assert smi_answers(node, probe)[1][1] == "0, 11.02, 38\n"
        budget.write_text(json.dumps({"pid": engine.pid, "gib": 41.5}))
        assert smi_answers(node, probe)[1] == (0, "96, 42.37, 61\n", "")
        assert smi_answers(node, SMI_FORMS[4])[1][1] == f"{4100 + node.host_number}, python3\n"
        assert_smi_forms_match(node)
        fault(node, "gpu-busy", "python3 'train.py' --tag \"$HOME\"")
        assert_smi_forms_match(node)
        engine.kill()  # a zombie until reaped
        wait_for(lambda: Path(f"/proc/{engine.pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z",
                 what="the killed engine to be a zombie")
        assert smi_answers(node, probe)[1][1] == "0, 11.02, 38\n"
        assert_smi_forms_match(node)
    finally:
        engine.kill()
        engine.wait()
    budget.write_text(json.dumps({"pid": engine.pid, "gib": 41.5}))  # its process is gone
    assert smi_answers(node, probe)[1][1] == "0, 11.02, 38\n"
    assert smi_answers(node, SMI_FORMS[4])[1][1] == f"{5200 + node.host_number}, python3 'train.py' --tag \"$HOME\"\n"
    assert_smi_forms_match(node)

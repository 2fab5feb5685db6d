"""The memory model of a simulated Spark: an engine's start-up and serving take MemAvailable,
a leak drains it, and at 0 the node wedges until `sparksim power-cycle` (new boot id)."""

import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from sparksim.host.node import NodeInfo
from sparksim.host.wedge import boot_id, is_wedged
from sparksim.standalone import free_port
from tests.sparksim.conftest import QWEN, node_shell, wait_for

RUN = "docker run -d --name vllm_node --gpus all --network host nvcr.io/nvidia/vllm:26.05-py3 "
KIB_PER_GIB = 1024 * 1024


def available_gib(node: NodeInfo) -> float:
    match = re.search(r"MemAvailable:\s+(\d+)", (Path(node.sim_dir) / "proc" / "meminfo").read_text())
    assert match is not None
    return int(match.group(1)) / KIB_PER_GIB


def health(node: NodeInfo, port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{node.address}:{port}/health", timeout=1) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return None


def serve(node: NodeInfo, port: int, *flags: str) -> None:
    line = (
        RUN + f"vllm serve {QWEN} --port {port} --max-model-len 32768 --gpu-memory-utilization 0.5 " + " ".join(flags)
    )
    assert node_shell(node, line).returncode == 0


def test_start_up_takes_memory_step_by_step_then_settles(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    idle = available_gib(node)
    port = free_port(node.address)
    serve(node, port, "--sim-startup-s", "300")  # 3 s real at the fixture's time scale
    seen = [idle]

    def record() -> bool:
        seen.append(available_gib(node))
        return health(node, port) == 200

    wait_for(record, what="engine healthy")
    final = available_gib(node)
    # Weights arrive over the loading phase: MemAvailable passed through values between.
    assert any(final + 5 < value < idle - 5 for value in seen)
    # The lowest point was during start-up (CUDA-graph capture's transient), below the final.
    assert min(seen) < final - 2
    # 0.5 of 128 GiB: weights + KV + activations, the OS's 3.5 GiB beside it.
    assert abs((idle - final) - 64.0) < 0.5


def test_a_leak_wedges_the_node_until_a_power_cycle(nodes: list[NodeInfo]) -> None:
    node, peer = nodes
    port = free_port(node.address)
    before_boot = boot_id(node)
    serve(node, port, "--sim-leak-gib-per-s", "0.2")  # 20 GiB a real second at this scale
    wait_for(lambda: health(node, port) == 200, what="engine healthy")
    wait_for(lambda: is_wedged(node), timeout=30, what="node wedged")
    assert available_gib(node) == 0.0
    assert health(node, port) is None  # the engine no longer answers (it times out)
    hung = subprocess.run(
        ["bash", "-c", f"export PATH={node.sim_dir}/bin:$PATH; timeout 2 docker ps; echo $?"],
        capture_output=True,
        text=True,
        timeout=10,
    )
    assert hung.stdout.strip().endswith("124")  # docker on the node hangs
    ping = node_shell(peer, f"ping -c 2 -W 1 {node.address}")
    assert ping.returncode == 1 and "100% packet loss" in ping.stdout
    cycled = subprocess.run(
        [sys.executable, "-m", "sparksim", "power-cycle", "--node-dir", node.sim_dir],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert not is_wedged(node) and boot_id(node) != before_boot and boot_id(node) in cycled.stdout
    assert available_gib(node) > 120
    assert health(node, port) is None
    status = node_shell(node, "docker ps -a --format '{{.Names}} {{.Status}}'").stdout
    assert status.startswith("vllm_node Exited")  # left as after a reboot: nothing restarts
    assert node_shell(peer, f"ping -c 1 -W 1 {node.address}").returncode == 0

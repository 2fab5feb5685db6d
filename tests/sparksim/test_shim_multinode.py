"""Ray and native multi-node serving across two simulated node directories."""

import json
import re
import subprocess
import sys
import urllib.request
from pathlib import Path

from sparksim.host.node import NodeInfo
from sparksim.standalone import free_port
from tests.sparksim.conftest import node_shell, wait_for
from tests.sparksim.test_shim import IMAGE, health

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
SERVE = (f"vllm serve {MODEL} --host 0.0.0.0 --port {{port}} --tensor-parallel-size 2 "
         "--max-model-len 1048576 --kv-cache-memory-bytes 11G --max-num-seqs 16")


FABRIC_ENV = ("-e NCCL_IB_HCA=rocep1s0f0,roceP2p1s0f0 -e NCCL_IB_GID_INDEX=3 "
              "-e NCCL_SOCKET_IFNAME=enp1s0f0np0")


def ray_gpus(node: NodeInfo) -> float:
    status = node_shell(node, "docker exec vllm_node ray status").stdout
    match = re.search(r"^ [\d.]+/([\d.]+) GPU$", status, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def keepalive(node: NodeInfo) -> None:
    assert node_shell(node, f"docker run -d --name vllm_node --network host --gpus all {IMAGE} "
                      "sleep infinity").returncode == 0


def test_ray_tp2_serves_once_both_gpus_joined(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    ray_port = free_port()
    head_ip = head.fabric_ip("enp1s0f0np0")
    for node in nodes:
        keepalive(node)
    assert node_shell(head, f"docker exec -d vllm_node ray start --block --head --port={ray_port}"
                      f" --node-ip-address={head_ip} --num-cpus=2 --include-dashboard=false "
                      "--disable-usage-stats").returncode == 0
    wait_for(lambda: ray_gpus(head) == 1.0, what="head GPU")
    assert node_shell(worker, "docker exec -d vllm_node ray start --block "
                      f"--address={head_ip}:{ray_port} --node-ip-address="
                      f"{worker.fabric_ip('enp1s0f0np0')}").returncode == 0
    wait_for(lambda: ray_gpus(head) == 2.0, what="two GPUs")
    port = free_port(head.address)
    assert node_shell(head, "docker exec -d vllm_node " + SERVE.format(port=port) +
                      " --distributed-executor-backend ray").returncode == 0
    wait_for(lambda: health(head, port) == 200, what="Ray engine healthy")
    assert "2.0/2.0 GPU" in node_shell(head, "docker exec vllm_node ray status").stdout
    # Removing the worker's container takes a GPU away: the TP=2 engine dies with it.
    assert node_shell(worker, "docker rm -f vllm_node").returncode == 0
    wait_for(lambda: health(head, port) in (None, 503), what="engine down after worker loss")


def test_ray_tp2_refuses_to_start_with_one_gpu(nodes: list[NodeInfo]) -> None:
    head = nodes[0]
    keepalive(head)
    ray_port = free_port()
    node_shell(head, f"docker exec -d vllm_node ray start --block --head --port={ray_port} "
               f"--node-ip-address={head.fabric_ip('enp1s0f0np0')}")
    wait_for(lambda: ray_gpus(head) == 1.0, what="head GPU")
    node_shell(head, "docker exec -d vllm_node " + SERVE.format(port=free_port(head.address)) +
               " --distributed-executor-backend ray --sim-placement-timeout-s 30")
    wait_for(lambda: "Cannot provide a placement group" in node_shell(
        head, "docker logs vllm_node").stdout, what="placement failure")
    logs = node_shell(head, "docker logs vllm_node").stdout
    assert "Waiting for creating a placement group" in logs


def test_native_multinode_rank0_serves_after_the_headless_worker(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    master_port = free_port()
    port = free_port(head.address)
    native = (f" --nnodes 2 --master-addr {head.fabric_ip('enp1s0f0np0')} "
              f"--master-port {master_port}")
    assert node_shell(worker, f"docker run -d --name vllm_node {FABRIC_ENV} {IMAGE} "
                      + SERVE.format(port=port) + native + " --node-rank 1 --headless"
                      ).returncode == 0
    assert node_shell(head, f"docker run -d --name vllm_node {FABRIC_ENV} {IMAGE} "
                      + SERVE.format(port=port) + native + " --node-rank 0").returncode == 0
    wait_for(lambda: health(head, port) == 200, what="rank 0 serving")
    logs = node_shell(head, "docker logs vllm_node").stdout
    assert "NET/IB : Using [0]rocep1s0f0:1/RoCE [1]roceP2p1s0f0:1/RoCE" in logs
    assert health(worker, port) is None  # headless: no API server on the worker
    assert node_shell(worker, "docker exec vllm_node pgrep -f 'vllm serve'").returncode == 0
    # Traffic of a TP group shows on the RoCE counters of both nodes.
    port_dir = Path(worker.sim_dir) / "sys/class/infiniband/rocep1s0f0/ports/1"
    counter = port_dir / "counters" / "port_xmit_data"
    before = int(counter.read_text())
    body = ('{"model":"' + MODEL + '","prompt":"traffic","max_tokens":20,"ignore_eos":true}')
    node_shell(head, f"curl -sf -H 'Content-Type: application/json' -d '{body}' "
               f"http://{head.address}:{port}/v1/completions")
    wait_for(lambda: int(counter.read_text()) > before, what="counters to grow")
    # Stopping rank 0 ends the headless worker too.
    node_shell(head, "docker rm -f vllm_node")
    wait_for(lambda: "Exited" in node_shell(worker, "docker ps -a --format '{{.Status}}'").stdout,
             what="worker exit")


def test_native_rank0_alone_times_out(nodes: list[NodeInfo]) -> None:
    head = nodes[0]
    node_shell(head, f"docker run -d --name vllm_node {IMAGE} " + SERVE.format(port=free_port())
               + f" --nnodes 2 --node-rank 0 --master-addr {head.fabric_ip('enp1s0f0np0')} "
               f"--master-port {free_port()} --sim-placement-timeout-s 30")
    wait_for(lambda: "Exited (1)" in node_shell(head, "docker ps -a --format '{{.Status}}'").stdout,
             what="rank 0 exit")
    assert "timed out" in node_shell(head, "docker logs vllm_node").stdout


def test_a_hardcoded_gid_index_that_moved_breaks_the_start(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    subprocess.run([sys.executable, "-m", "sparksim", "fault", "--node-dir", worker.sim_dir,
                    "gid-index", "roceP2p1s0f0", "5"], check=True)
    master_port, port = free_port(), free_port(head.address)
    native = (f" --nnodes 2 --master-addr {head.fabric_ip('enp1s0f0np0')} "
              f"--master-port {master_port}")
    node_shell(worker, f"docker run -d --name vllm_node {FABRIC_ENV} {IMAGE} "
               + SERVE.format(port=port) + native + " --node-rank 1 --headless")
    node_shell(head, f"docker run -d --name vllm_node {FABRIC_ENV} {IMAGE} "
               + SERVE.format(port=port) + native + " --node-rank 0")
    wait_for(lambda: "Exited (1)" in node_shell(head, "docker ps -a --format '{{.Status}}'").stdout,
             what="rank 0 exit")
    logs = node_shell(head, "docker logs vllm_node").stdout
    assert "IBV_WC_RETRY_EXC_ERR" in logs and "spark2:roceP2p1s0f0 is not RoCE v2" in logs


def test_without_ib_devices_nccl_falls_back_to_sockets_and_decode_slows(
    nodes: list[NodeInfo],
) -> None:
    head, worker = nodes
    master_port, port = free_port(), free_port(head.address)
    native = (f" --nnodes 2 --master-addr {head.fabric_ip('enp1s0f0np0')} "
              f"--master-port {master_port}")
    node_shell(worker, f"docker run -d --name vllm_node -e NCCL_IB_DISABLE=1 {IMAGE} "
               + SERVE.format(port=port) + native + " --node-rank 1 --headless")
    node_shell(head, f"docker run -d --name vllm_node -e NCCL_IB_DISABLE=1 {IMAGE} "
               + SERVE.format(port=port) + native + " --node-rank 0")
    wait_for(lambda: health(head, port) == 200, what="rank 0 serving")
    assert "NET/Socket : Using [0]enp1s0f0np0" in node_shell(head, "docker logs vllm_node").stdout
    with urllib.request.urlopen(f"http://{head.address}:{port}/_sim/state") as reply:
        state = json.loads(reply.read())
    assert state["profile"]["decode_tok_s"] == 34.0  # half of 68 over sockets


def test_memory_is_booked_once_per_node(nodes: list[NodeInfo]) -> None:
    head, worker = nodes
    master_port, port = free_port(), free_port(head.address)
    native = (f" --nnodes 2 --master-addr {head.fabric_ip('enp1s0f0np0')} "
              f"--master-port {master_port}")
    node_shell(worker, f"docker run -d --name vllm_node {IMAGE} " + SERVE.format(port=port)
               + native + " --node-rank 1 --headless")
    node_shell(head, f"docker run -d --name vllm_node {IMAGE} " + SERVE.format(port=port)
               + native + " --node-rank 0")
    wait_for(lambda: health(head, port) == 200, what="rank 0 serving")

    def available_gib(node: NodeInfo) -> float:
        meminfo = (Path(node.sim_dir) / "proc" / "meminfo").read_text()
        match = re.search(r"MemAvailable:\s+(\d+)", meminfo)
        assert match is not None
        return int(match.group(1)) / 1024**2

    # 156 GB (seed 004, not GiB) of weights over TP=2, 11 GiB of KV, 4 GiB of activations,
    # 3.5 GiB of OS.
    expected = 128 - 3.5 - (156e9 / 2**30 / 2 + 11 + 4)
    assert abs(available_gib(head) - expected) < 0.1
    assert abs(available_gib(worker) - expected) < 0.1


def test_ray_backend_without_a_cluster_starts_a_local_instance(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    port = free_port(node.address)
    node_shell(node, f"docker run -d --name solo {IMAGE} vllm serve Qwen/Qwen3.8-27B-FP8 "
               f"--port {port} --distributed-executor-backend ray")
    wait_for(lambda: health(node, port) == 200, what="single-GPU Ray engine")
    assert "Started a local Ray instance." in node_shell(node, "docker logs solo").stdout

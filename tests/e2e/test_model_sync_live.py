"""Browser: an admin starts a sync from the lane page (one click), and the job page shows the
copy's bytes, rate and ETA moving while rsync runs between two simulated Sparks over real
OpenSSH, then the verification's verdict."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from jobs.models import Job, JobKind
from lanes.crypto import encrypt_private_key
from lanes.models import Node
from sparksim.cluster import cluster_down
from sparksim.host.node import load_node
from sparksim.host.storage import seed_model
from sparksim.hub.repos import create_repo
from tests.conftest import browser_login, wait_for
from tests.jobs.conftest import create_lane, make_sim_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]
MODEL = "org/live-model"


def test_sync_progress_reaches_the_job_page_live(asgi_server: Any, page: Any, admin_user: Any, job_threads: Any,
                                                 tmp_path: Path) -> None:
    cluster = make_sim_cluster(tmp_path / "sim", ["spark1", "spark2"], "ssh", tmp_path)
    try:
        repo = create_repo(tmp_path / "hub", MODEL, {"config.json": b"{}", **{f"s{i}.safetensors": 2_000_000
                                                                              for i in range(4)}})
        seed_model(load_node(cluster.node("spark1").sim_dir), repo)
        lane = create_lane("live", [cluster.node("spark1"), cluster.node("spark2")], seed_weights=False,
                           model_id=MODEL)
        complete = {"models": [{"model_id": MODEL, "commit": repo.commit, "refs": ["main"], "files": 5,
                                "bytes": repo.total_bytes(), "complete": True}], "images": [], "free_bytes": 10**12}
        Node.objects.filter(name="spark1").update(inventory=complete)
        Node.objects.update(transfer_key_encrypted=encrypt_private_key(cluster.client_private_key))
        browser_login(page, asgi_server.url, admin_user.username)
        page.goto(f"{asgi_server.url}/lanes/{lane.name}/")
        assert "files-unknown" in page.content()  # spark2 never inventoried
        page.select_option("#lane-files select[name=network]", "management")
        page.fill("#lane-files input[name=bwlimit_mbps]", "2")  # a slow link: the page sees the copy move
        page.click("#lane-sync")
        page.wait_for_url(f"{asgi_server.url}/jobs/*/")
        job = Job.objects.get(kind=JobKind.MODEL_SYNC)
        assert job.params["targets"] == ["spark2"] and job.params["network"] == "management"
        copy = page.locator("#step-1 .step-progress")
        copy.wait_for(timeout=30_000)
        seen = set()
        wait_for(lambda: seen.add(copy.inner_text()) or len([t for t in seen if " of 7.6 MiB (" in t]) >= 2,
                 timeout=30, what="two different progress figures on the page")
        assert any(re.search(r"/s, ETA \d+:\d\d", text) for text in seen), seen
        page.wait_for_selector("#job-state .state-succeeded", timeout=60_000)
        page.locator("#step-2 .step-progress", has_text="5 files match the hub's sizes and hashes").wait_for()
    finally:
        for server in cluster.servers:
            server.stop()
        cluster_down(tmp_path / "sim")

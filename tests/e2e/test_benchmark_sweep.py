"""Browser: an admin starts a sweep from the benchmarks page, watches the progress bar and
the decode chart fill in without reloading, runs a second sweep, compares the two side by
side, and exports one run as JSON."""

from __future__ import annotations

import json
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from django.db import connection

from benchmarks.models import BenchmarkRun
from benchmarks.services import benchmark_start
from sparksim.standalone import EngineHandle
from tests.benchmarks.conftest import SERVED, lane_for
from tests.conftest import SIM_QWEN, browser_login, wait_for

pytestmark = [pytest.mark.e2e, pytest.mark.django_db(transaction=True)]


def test_admin_runs_a_sweep_compares_two_runs_and_exports_json(
    asgi_server, page, admin_user, engine_factory: Callable[..., EngineHandle], job_threads, tmp_path: Path
) -> None:
    # Real time (scale 1): 200 tokens at ~120 tok/s make each level last a couple of seconds.
    engine = engine_factory(SIM_QWEN, "--served-model-name", SERVED, time_scale=1.0)
    lane = lane_for(engine)
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/benchmarks/")
    page.fill("#id_concurrency", "1,2,4")
    page.fill("#id_prompt_tokens", "64")
    page.fill("#id_output_tokens", "200")
    page.fill("#id_label", "first")
    # The lane holds the sweep's requests until the run page is live, so the page sees every
    # level end however long a loaded machine takes to open it.
    httpx.post(f"{engine.url}/_sim/faults", json={"hold": True}).raise_for_status()
    page.click("#start-button")
    page.wait_for_url(f"{asgi_server.url}/benchmarks/*/")
    page.evaluate("window.__notReloaded = true")
    page.wait_for_selector("#live-status[data-state=open]")
    httpx.post(f"{engine.url}/_sim/faults", json={"hold": False}).raise_for_status()
    # The bar moves part of the way while levels remain, and the chart gains points.
    page.wait_for_function("() => { const w = parseInt(document.getElementById('bench-progress').style.width);"
                           " return w > 0 && w < 100; }", timeout=60_000)
    page.wait_for_function("() => window.benchCharts.decode.data.datasets.length === 1 &&"
                           " window.benchCharts.decode.data.datasets[0].data.filter(v => v > 0).length === 3",
                           timeout=60_000)
    page.wait_for_selector("#run-state:has-text('succeeded')", timeout=60_000)
    assert page.inner_text("#bench-progress") == "100%"
    # One row per level (a level's notes and failures go in rows of their own under it).
    levels = page.locator("#bench-levels tbody tr:not(.level-notes):not(.level-errors)")
    assert levels.count() == 3
    # The /metrics columns of a lane without speculation: no acceptance; the header names each
    # column the row fills.
    headers = page.locator("#bench-levels thead th").all_inner_texts()
    cells = levels.first.locator("td").all_inner_texts()
    assert len(cells) == len(headers)
    assert cells[headers.index("spec acc. · length")] == "-"
    # The client's CPU beside the host's: a busy host is not the client's fault.
    assert re.fullmatch(r"(\d+% CPU · host \d+% busy|saturated: .+)", cells[headers.index("client")])
    assert page.evaluate("window.__notReloaded") is True
    first = BenchmarkRun.objects.get(label="first")

    second = second_sweep(lane, admin_user)

    page.goto(f"{asgi_server.url}/benchmarks/")
    page.check(f"#run-table tr[data-job='{first.job_id}'] input[name=a]")
    page.check(f"#run-table tr[data-job='{second.job_id}'] input[name=b]")
    page.click("#compare-button")
    page.wait_for_url(f"{asgi_server.url}/benchmarks/compare/*")
    assert page.evaluate("window.compareCharts.decode.data.datasets.length") == 2
    assert page.locator("#compare-table tbody tr").count() >= 3 * 13
    assert "first" in page.inner_text("#compare-heads") and "second" in page.inner_text("#compare-heads")

    page.goto(f"{asgi_server.url}/benchmarks/{first.job_id}/")
    with page.expect_download() as download:
        page.click("#export-json")
    exported = json.loads(Path(download.value.path()).read_text())
    assert [result["max_concurrency"] for result in exported["results"]] == [1, 2, 4]
    assert all("mean_ttft_ms" in result and "p99_itl_ms" in result and "output_throughput" in result
               for result in exported["results"])
    assert exported["lane_revision"] == 1


def second_sweep(lane: Any, user: Any) -> BenchmarkRun:
    """A second, shorter sweep of the same lane, started (and waited for) outside the page."""
    # Started from a thread: its on-commit broadcast cannot run in this thread, which holds
    # Playwright's event loop.
    starter = threading.Thread(target=lambda: (benchmark_start(lane=lane, user=user, params={
        "concurrency": [1, 2, 4], "prompt_tokens": 64, "output_tokens": 50, "label": "second"}), connection.close()))
    starter.start()
    starter.join()
    return wait_for(lambda: BenchmarkRun.objects.filter(label="second", job__state="succeeded").first(),
                    timeout=60, what="the second sweep")


def test_an_open_loop_levels_schedule_figures_goodput_and_flags_show_under_its_row(
        asgi_server: Any, page: Any, admin_user: Any) -> None:
    from benchmarks.models import BenchmarkLevel
    from benchmarks.stats import RequestRecord, Slo, level_stats
    from jobs.models import Job, JobKind, JobState
    from lanes.models import Lane, LaneNode, LaneRevision, Node

    node = Node.objects.create(name="spark9", address="127.0.0.9", transport="local")
    lane = Lane.objects.create(name="qwen", model_id=SIM_QWEN, image="img@sha256:" + "0" * 64, max_model_len=32768)
    LaneNode.objects.create(lane=lane, node=node, rank=0)
    revision = LaneRevision.objects.create(lane=lane, number=1, config={})
    params = {"request_rates": [40.0], "targets": ["direct"], "cache_mode": "cold", "prompt_tokens": 100,
              "output_tokens": 3, "requests_per_level": 2}
    job = Job.objects.create(kind=JobKind.BENCHMARK, lane=lane, lane_revision=revision, state=JobState.SUCCEEDED,
                             params=params)
    run = BenchmarkRun.objects.create(job=job, lane=lane, lane_name="qwen", lane_revision=revision, revision_number=1,
                                      levels_planned=1, params=params)
    # Two requests meant 25 ms apart that left 1 s apart: late, and one past the TTFT bound.
    records = [RequestRecord(sent_at=0.0, scheduled_at=0.0, chunk_times=[0.1, 0.2, 0.3], output_tokens=3),
               RequestRecord(sent_at=1.0, scheduled_at=0.025, chunk_times=[1.1, 1.2, 1.3], output_tokens=3)]
    stats = level_stats(records, started_at=0.0, ended_at=1.3, slo=Slo(ttft_s=0.5))
    stats["flags"] = ["sent 1.00 requests/s against a schedule of 40.00 (98% short)"]
    BenchmarkLevel.objects.create(run=run, position=0, target="direct", request_rate=40.0, stats=stats)
    browser_login(page, asgi_server.url, admin_user.username)
    page.goto(f"{asgi_server.url}/benchmarks/{job.pk}/")
    notes = page.locator("#bench-levels tbody tr.level-notes")
    notes.wait_for()
    text = notes.inner_text()
    assert "from the schedule: TTFT p50 588" in text  # (100 + 1075) / 2 ms
    assert "sent 1 req/s (schedule 40), dispatch delay p95 926 ms" in text
    assert "goodput 50% (1 of 2 within TTFT ≤ 500 ms)" in text
    assert "flagged: sent 1.00 requests/s against a schedule of 40.00" in text

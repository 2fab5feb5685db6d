"""The scrape tick against real sparksim engines over HTTP and simulated Sparks over the
local transport: figures, samples, a dead and a hung lane marked without stalling."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path

import httpx
import pytest
from django.core.cache import cache
from django.test import override_settings

from jobs.models import LaneWatchdog
from jobs.transports import NodeEndpoint
from jobs.transports.base import sim_prefix
from lanes.models import Node
from metrics.models import Alert, Sample, ScrapeTarget
from metrics.nodeprobe import GPU_FIELDS, PROBE_COMMAND, NodeReading, node_figures, parse_probe_output
from metrics.scraper import LaneTarget, ScrapeResult, scrape_all, scrape_node
from metrics.services import scrape_tick
from metrics.tasks import TICK_LOCK
from metrics.tasks import scrape_tick as scrape_tick_task
from sparksim.host.node import NodeInfo
from sparksim.host.procfs import record_budget
from sparksim.host.sysfs import add_traffic
from tests.conftest import free_port
from tests.metrics.conftest import QWEN, make_lane_for

pytestmark = pytest.mark.django_db


def traffic(url: str, n: int = 3) -> None:
    for _ in range(n):
        response = httpx.post(f"{url}/v1/completions", timeout=30,
                              json={"model": QWEN, "prompt": "tell me about sparks " * 30, "max_tokens": 24})
        assert response.status_code == 200


def test_a_serving_lane_gets_rates_and_latency_percentiles(qwen_engine):
    make_lane_for("qwen", "127.0.0.1", qwen_engine.port)
    scrape_tick()
    first = ScrapeTarget.objects.get(kind="lane", target="qwen")
    assert first.ok and "gen_tps" not in first.figures and first.figures["running"] == 0.0
    traffic(qwen_engine.url)
    scrape_tick()
    state = ScrapeTarget.objects.get(kind="lane", target="qwen")
    assert state.ok and state.consecutive_failures == 0
    assert state.figures["gen_tps"] > 0 and state.figures["prompt_tps"] > 0
    assert state.figures["ttft_p95_ms"] > 0 and state.figures["itl_p50_ms"] > 0
    assert 0 <= state.figures["prefix_hit_pct"] <= 100
    assert Sample.objects.filter(kind="lane", target="qwen").count() == 2


@override_settings(METRICS_SCRAPE_TIMEOUT_S=0.5)
def test_a_dead_and_a_hung_lane_are_marked_and_the_tick_still_finishes(qwen_engine, silent_port):
    make_lane_for("qwen", "127.0.0.1", qwen_engine.port)
    make_lane_for("dead", "127.0.0.1", free_port())
    make_lane_for("hung", "127.0.0.1", silent_port)
    started = time.monotonic()
    report = scrape_tick()
    elapsed = time.monotonic() - started
    assert report["failed"] == 2
    assert elapsed < 60  # bounded by the per-target timeout: the hung peer never answers
    dead = ScrapeTarget.objects.get(kind="lane", target="dead")
    hung = ScrapeTarget.objects.get(kind="lane", target="hung")
    assert not dead.ok and "dead" not in dead.error and "127.0.0.1" in dead.error
    assert not hung.ok and "within 0.5s" in hung.error
    assert ScrapeTarget.objects.get(kind="lane", target="qwen").ok
    scrape_tick()
    assert ScrapeTarget.objects.get(kind="lane", target="dead").consecutive_failures == 2


def test_stopped_lanes_are_not_scraped(qwen_engine):
    make_lane_for("qwen", "127.0.0.1", qwen_engine.port, state="stopped")
    scrape_tick()
    assert not ScrapeTarget.objects.filter(kind="lane").exists()


def test_a_simulated_spark_is_read_over_its_transport(sim_nodes):
    for info in sim_nodes:
        Node.objects.create(name=info.name, address=info.address, transport="local", sim_dir=info.sim_dir)
    Node.objects.create(name="gone", address="127.0.0.250", transport="ssh", ssh_port=free_port(), state="online")
    scrape_tick()
    with override_settings(JOBS_SSH_CONNECT_TIMEOUT_S=1.0):
        scrape_tick()
    spark1 = ScrapeTarget.objects.get(kind="node", target="spark1")
    assert spark1.ok, spark1.error
    f = spark1.figures
    assert 100 < f["mem_avail_gib"] <= 128  # the simulated Spark's 128 GiB less the OS
    assert f["swap_used_gib"] == 0.0
    assert f["gpu_temp_c"] == 38.0 and f["gpu_util_pct"] == 0.0 and f["gpu_power_w"] == pytest.approx(11.02)
    assert 0.0 <= f["cpu_pct"] <= 100.0
    assert f["roce_tx_Bps"] == 0.0 and "roce_rx_Bps:rocep1s0f0" in f
    gone = ScrapeTarget.objects.get(kind="node", target="gone")
    assert not gone.ok and gone.consecutive_failures == 2 and gone.error


def test_the_probe_output_parse_and_roce_counter_rates():
    lines = [
        "@meminfo", "MemTotal:       134217728 kB", "MemAvailable:    8388608 kB", "SwapTotal:  16777216 kB",
        "SwapFree:   15728640 kB", "@stat", "cpu  100 0 100 700 100 0 0 0 0 0", "@gpu", "96, 42.37, 61",
        "@roce", "/s/class/infiniband/rocep1s0f0/ports/1/counters/port_xmit_data 1000",
        "/s/class/infiniband/rocep1s0f0/ports/1/counters/port_rcv_data 500",
    ]
    before = parse_probe_output(lines, at=0.0)
    after_lines = [line.replace("cpu  100 0 100 700", "cpu  200 0 200 1300").replace(" 1000", " 2000")
                   .replace(" 500", " 100") for line in lines]  # rcv went down: the counter was reset
    after = parse_probe_output(after_lines, at=2.0)
    figures = node_figures(before, after)
    assert figures["mem_avail_gib"] == pytest.approx(8.0)
    assert figures["swap_used_gib"] == pytest.approx(1.0)
    assert figures["gpu_util_pct"] == 96 and figures["gpu_temp_c"] == 61
    assert figures["cpu_pct"] == pytest.approx(25.0)
    assert figures["roce_tx_Bps"] == pytest.approx(1000 * 4 / 2)  # 4-octet words
    assert figures["roce_rx_Bps"] == pytest.approx(100 * 4 / 2)


def test_a_tick_skips_while_another_one_runs(qwen_engine):
    make_lane_for("qwen", "127.0.0.1", qwen_engine.port)
    cache.add(TICK_LOCK, True, timeout=30)
    try:
        assert scrape_tick_task() == {"skipped": True}
        assert not ScrapeTarget.objects.exists()
    finally:
        cache.delete(TICK_LOCK)
    assert scrape_tick_task()["targets"] == 2  # the lane and the node it runs on
    assert ScrapeTarget.objects.get(kind="lane", target="qwen").ok


def test_a_lane_the_rdma_watchdog_holds_degraded_gets_its_alert_from_the_tick(qwen_engine):
    lane = make_lane_for("qwen", "127.0.0.1", qwen_engine.port)
    LaneWatchdog.objects.create(lane=lane, degraded=True, average_us=15.5, threshold_us=12.0)
    scrape_tick()
    assert Alert.objects.get(rule="rdma_rtt_high", target="qwen").state == "open"
    LaneWatchdog.objects.filter(lane=lane).update(degraded=False, average_us=8.0)
    scrape_tick()
    assert Alert.objects.get(rule="rdma_rtt_high", target="qwen").state == "resolved"


def test_targets_are_scraped_at_most_n_at_a_time_each_within_its_timeout():
    """Six lanes that never answer, two slots: never more than two requests in flight, and
    every lane marked failed by its own timeout (counted from its turn, not from the tick)."""
    in_flight, peak = 0, 0

    async def never_answers(request: httpx.Request) -> httpx.Response:
        nonlocal in_flight, peak
        in_flight += 1
        peak = max(peak, in_flight)
        try:
            await asyncio.sleep(3600)
            raise AssertionError("the scraper's timeout should have cancelled this")
        finally:
            in_flight -= 1

    async def run() -> list[ScrapeResult]:
        async with httpx.AsyncClient(transport=httpx.MockTransport(never_answers)) as client:
            lanes = [LaneTarget(f"lane{i}", f"http://10.0.0.{i}:8000/metrics") for i in range(6)]
            return await scrape_all(lanes, [], timeout_s=0.2, client=client, concurrency=2)

    results = asyncio.run(run())
    assert peak == 2 and in_flight == 0
    assert [r.name for r in results] == [f"lane{i}" for i in range(6)]
    assert all(r.reading is None and "no answer" in r.error for r in results)


# The probe as it was written with cat, head and $(cat) (a fork per file): the builtin-only
# probe must print the same lines.
FORKING_PROBE = (
    'P="${SPARK_PROCFS:-/proc}"; S="${SPARK_SYSFS:-/sys}"; '
    'echo @meminfo; cat "$P/meminfo"; '
    'echo @stat; head -n1 "$P/stat" 2>/dev/null || head -n1 /proc/stat; '
    f"echo @gpu; timeout -k 1 3 nvidia-smi --query-gpu={GPU_FIELDS} --format=csv,noheader,nounits 2>/dev/null; "
    'echo @roce; for f in "$S"/class/infiniband/*/ports/*/counters/port_xmit_data '
    '"$S"/class/infiniband/*/ports/*/counters/port_rcv_data; do '
    '[ -r "$f" ] && printf "%s %s\\n" "$f" "$(cat "$f")"; done; true'
)


def probe_lines(info: NodeInfo, command: str) -> list[str]:
    done = subprocess.run(["bash", "-c", sim_prefix(info.sim_dir) + command], capture_output=True, text=True,
                          check=True, timeout=60)
    assert done.stderr == ""
    # /proc/stat is this machine's and moves between two runs.
    return [line for line in done.stdout.splitlines() if not line.startswith("cpu ")]


def read_node(info: NodeInfo) -> NodeReading:
    endpoint = NodeEndpoint(name=info.name, address=info.address, transport="local", sim_dir=info.sim_dir)
    result = asyncio.run(scrape_node(endpoint, timeout_s=30))
    assert result.error == "" and isinstance(result.reading, NodeReading)
    return result.reading


def test_the_probe_prints_what_the_forking_probe_printed_and_reads_every_field(sim_nodes):
    info = sim_nodes[0]
    add_traffic(info, 4 * 4 * 1000)  # 1,000 words on each of the 4 devices, both directions
    assert probe_lines(info, PROBE_COMMAND) == probe_lines(info, FORKING_PROBE)
    idle = read_node(info)
    meminfo = dict(line.split(":", 1) for line in (Path(info.sim_dir) / "proc" / "meminfo").read_text().splitlines())
    assert idle.mem_available_kib == float(meminfo["MemAvailable"].split()[0])
    assert idle.swap_total_kib == idle.swap_free_kib == 16 * 1024 * 1024
    assert idle.cpu_total and idle.cpu_idle is not None and 0 < idle.cpu_idle < idle.cpu_total
    assert idle.gpu == {"util": 0.0, "power": 11.02, "temp": 38.0}
    assert idle.roce == {device: {"port_xmit_data": 1000.0, "port_rcv_data": 1000.0}
                         for device in ("rocep1s0f0", "rocep1s0f1", "roceP2p1s0f0", "roceP2p1s0f1")}
    # An engine running on the node: its budget leaves MemAvailable and the GPU is busy.
    engine = subprocess.Popen(["sleep", "600"])
    try:
        record_budget(info, engine.pid, 40.0)
        assert probe_lines(info, PROBE_COMMAND) == probe_lines(info, FORKING_PROBE)
        busy = read_node(info)
        assert busy.gpu == {"util": 96.0, "power": 42.37, "temp": 61.0}
        assert busy.mem_available_kib == pytest.approx(float(idle.mem_available_kib) - 40 * 1024 * 1024)
        assert json.loads((Path(info.sim_dir) / "proc" / ".budgets" / f"{engine.pid}.json").read_text())["gib"] == 40.0
    finally:
        engine.kill()
        engine.wait()

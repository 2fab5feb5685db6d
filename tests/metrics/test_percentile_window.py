"""Latency percentiles over a sliding window (METRICS_PERCENTILE_WINDOW_S, default 60 s),
not over one scrape interval: a slow lane keeps its TTFT p95 between first tokens, a
restarted engine starts the window afresh, a lane with no requests has no figure (not 0).

The ticks go through the scrape's real path after the network (services.tick_record: the
state kept between scrapes in ScrapeTarget.reading, figures, samples, alerts), with readings
built from a captured vLLM page whose histograms grow as the test says."""

from __future__ import annotations

import math
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from django.test import override_settings

from lanes.models import Lane
from metrics.models import Alert, Sample, ScrapeTarget
from metrics.parsing import TTFT, EngineReading, HistogramSnapshot, lane_figures, parse_vllm_metrics, window_advance
from metrics.rules import TargetView, held_rules
from metrics.scraper import ScrapeResult
from metrics.services import WINDOW_SNAPSHOTS, tick_record
from tests.metrics.conftest import make_lane_for

DATA = Path(__file__).parent / "data"
ITL = "vllm:inter_token_latency_seconds"
E2E = "vllm:e2e_request_latency_seconds"
T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
START = 1_700_000_000.0  # the readings' wall-clock time at T0


class Engine:
    """A vLLM engine's /metrics as the scraper would read it: cumulative histograms that
    grow by the observations the test makes."""

    def __init__(self) -> None:
        self.reading = parse_vllm_metrics((DATA / "vllm_metrics.txt").read_text(), at=START)
        self.reading.gauges["vllm:num_requests_running"] = 3.0
        self.reading.gauges["vllm:num_requests_waiting"] = 0.0

    def observe(self, histogram: str, seconds: float, n: int = 1) -> None:
        for bound in self.reading.histograms[histogram]:
            if seconds <= bound:
                self.reading.histograms[histogram][bound] += n

    def restart(self) -> None:
        """A new engine process: every counter and bucket begins again at 0."""
        self.reading.counters = {name: 0.0 for name in self.reading.counters}
        self.reading.histograms = {name: {bound: 0.0 for bound in b} for name, b in self.reading.histograms.items()}

    def read(self, t: float) -> EngineReading:
        return EngineReading.from_json({**self.reading.to_json(), "at": START + t})


def tick(lane: Lane, engine: Engine, t: float) -> dict[str, float]:
    """One scrape at T0 + t seconds; the lane's figures from it."""
    result = ScrapeResult("lane", lane.name, engine.read(t), "", 1.0)
    tick_record(now=T0 + timedelta(seconds=t), results=[result], lanes=[lane], nodes=[])
    return dict(ScrapeTarget.objects.get(kind="lane", target=lane.name).figures)


@pytest.fixture
def lane(db: None) -> Lane:
    return make_lane_for("slow", "127.0.0.1", 1)


@override_settings(METRICS_ALERT_TTFT_P95_MS=5000)
def test_a_slow_lane_whose_first_tokens_come_every_20_s_has_a_ttft_p95_at_every_scrape(lane: Lane) -> None:
    """Seen live: with prefill slowed 400x (39 s first tokens), most 5 s intervals held no
    first token and the dashboard showed "—" for exactly the lane in trouble."""
    engine = Engine()
    assert "ttft_p95_ms" not in tick(lane, engine, 0)  # a first reading has nothing to compare
    seen = {}
    for t in range(5, 185, 5):
        if t % 20 == 0:
            engine.observe(TTFT, 39.0)
        seen[t] = tick(lane, engine, t)
    for t in (5, 10, 15):
        assert "ttft_p95_ms" not in seen[t]  # no first token yet: no figure, not 0
    for t in range(20, 185, 5):
        # 39 s lies in vLLM's (20, 40] bucket: p95 interpolates to 39 s.
        assert seen[t]["ttft_p95_ms"] == pytest.approx(39_000.0), t
        assert 20_000 < seen[t]["ttft_p50_ms"] <= 40_000
    # Every tick stored the figure: the chart and the sparkline have no gap either.
    stored = Sample.objects.filter(kind="lane", target="slow", ts__gte=T0 + timedelta(seconds=20))
    assert stored.count() == 33 and all("ttft_p95_ms" in s.values for s in stored)
    # One alert, open throughout, opened from figures alone (no scrape lacked one to hold on).
    alert = Alert.objects.get()
    assert alert.rule == "ttft_high" and alert.state == "open"
    # What the lane keeps between scrapes stays bounded: ~one snapshot per window/6 s.
    state = ScrapeTarget.objects.get(kind="lane", target="slow").reading
    assert len(state["window"]) <= WINDOW_SNAPSHOTS + 2


def test_the_window_forgets_what_is_older_than_it_and_then_there_is_no_figure(lane: Lane) -> None:
    engine = Engine()
    tick(lane, engine, 0)
    engine.observe(TTFT, 0.05, n=20)
    engine.observe(ITL, 0.02, n=200)
    engine.observe(E2E, 1.5, n=20)
    figures = tick(lane, engine, 5)
    assert 0 < figures["ttft_p95_ms"] <= 60 and 0 < figures["itl_p95_ms"] <= 25 and figures["e2e_p95_ms"] > 1000
    for t in range(10, 65, 5):  # nothing new, but the requests are still within the minute
        assert tick(lane, engine, t)["ttft_p95_ms"] == figures["ttft_p95_ms"]
    for t in (65, 70, 120):  # the minute has passed with no request: no figure, not 0
        figures = tick(lane, engine, t)
        assert not {"ttft_p50_ms", "ttft_p95_ms", "itl_p95_ms", "e2e_p95_ms"} & set(figures), t
        assert figures["running"] == 3.0


@override_settings(METRICS_PERCENTILE_WINDOW_S=30)
def test_the_window_follows_its_setting(lane: Lane) -> None:
    engine = Engine()
    tick(lane, engine, 0)
    engine.observe(TTFT, 0.05, n=5)
    assert "ttft_p95_ms" in tick(lane, engine, 5)
    # The window starts at the reading 30 s ago: the observations (made between the readings
    # at 0 and 5) count until the reading at 0 leaves it.
    assert "ttft_p95_ms" in tick(lane, engine, 30)
    assert "ttft_p95_ms" not in tick(lane, engine, 35)


def test_an_engine_restart_starts_the_window_afresh(lane: Lane) -> None:
    engine = Engine()
    tick(lane, engine, 0)
    engine.observe(TTFT, 0.05, n=100)  # fast, before the restart
    assert tick(lane, engine, 5)["ttft_p95_ms"] < 100
    engine.restart()
    engine.observe(TTFT, 3.0, n=4)  # the new engine's first requests: slow (cold caches)
    after = tick(lane, engine, 10)
    # Only the new engine's observations: the old fast ones neither count nor turn negative.
    assert 2_500 < after["ttft_p50_ms"] <= after["ttft_p95_ms"] <= 5_000
    # The window now starts at the restart: the same figure while nothing new arrives...
    assert tick(lane, engine, 15)["ttft_p95_ms"] == after["ttft_p95_ms"]
    engine.observe(TTFT, 0.05, n=36)
    assert tick(lane, engine, 20)["ttft_p95_ms"] > 1_000  # ...and 4 slow in 40 still rank in the p95
    engine.observe(TTFT, 0.05, n=10)
    assert tick(lane, engine, 80)["ttft_p95_ms"] < 100  # the restart's slow ones have left the window


def test_a_restart_is_seen_from_any_bucket_that_went_down() -> None:
    """The +Inf count alone misses a restart whose new engine already served as many
    requests as the old one had: any smaller bucket means the counts began again."""
    engine = Engine()
    before = engine.read(0)
    engine.observe(TTFT, 0.05, n=10)
    window = [HistogramSnapshot.of(before)]
    engine.restart()
    total = before.histograms[TTFT][math.inf] + 10
    engine.observe(TTFT, 2500.0, n=int(total))  # as many as before, all beyond the fast buckets
    current = engine.read(5)
    assert current.histograms[TTFT][math.inf] >= before.histograms[TTFT][math.inf]
    start, kept = window_advance(window, before, current, window_s=60, step_s=5)
    assert start is not None and start.histograms == {} and len(kept) == 2
    figures = lane_figures(before, current, window_start=start)
    assert figures["ttft_p50_ms"] > 1_000_000


def test_a_lane_scraped_for_the_first_time_mid_life_has_no_figure_until_its_second_reading(lane: Lane) -> None:
    """Its cumulative counts go back to an unknown engine start; from the second reading on
    the window runs from the first one (a lane's first minute)."""
    engine = Engine()
    engine.observe(TTFT, 90.0, n=50)  # long before the portal looked
    assert "ttft_p95_ms" not in tick(lane, engine, 0)
    assert "ttft_p95_ms" not in tick(lane, engine, 5)  # nothing since the first reading
    engine.observe(TTFT, 0.05, n=3)
    for t in (10, 30, 60):
        assert tick(lane, engine, t)["ttft_p95_ms"] < 100, t


def test_state_kept_before_windows_existed_still_gives_percentiles(lane: Lane) -> None:
    """A ScrapeTarget row written by the per-interval scrape holds the reading alone."""
    engine = Engine()
    ScrapeTarget.objects.create(kind="lane", target="slow", ok=True, reading=engine.read(0).to_json())
    engine.observe(TTFT, 0.05, n=3)
    assert tick(lane, engine, 5)["ttft_p95_ms"] < 100
    # The stored reading became the window's first snapshot.
    assert ScrapeTarget.objects.get(kind="lane", target="slow").reading["window"][0]["at"] == START


def test_the_held_rule_covers_only_a_lane_with_no_first_token_in_the_whole_window() -> None:
    stuck = TargetView(kind="lane", name="stuck", figures={"running": 3.0, "waiting": 2.0}, consecutive_failures=0)
    slow = TargetView(kind="lane", name="slow", figures={"running": 3.0, "ttft_p95_ms": 39_000.0},
                      consecutive_failures=0)
    idle = TargetView(kind="lane", name="idle", figures={"running": 0.0, "waiting": 0.0}, consecutive_failures=0)
    assert held_rules([stuck, slow, idle]) == {("ttft_high", "lane", "stuck")}


@pytest.mark.parametrize(("window", "message"), [
    ("2", "PORTAL_METRICS_PERCENTILE_WINDOW_S: must be at least the scrape interval"),
    ("0", "PORTAL_METRICS_PERCENTILE_WINDOW_S: must be at least 1"),
    ("a minute", "PORTAL_METRICS_PERCENTILE_WINDOW_S: must be a number"),
])
def test_the_window_setting_is_validated(window: str, message: str) -> None:
    env = {**os.environ, "PORTAL_METRICS_PERCENTILE_WINDOW_S": window, "PORTAL_METRICS_SCRAPE_INTERVAL_S": "5"}
    result = subprocess.run([sys.executable, "-c", "import portal.settings"], env=env, capture_output=True, text=True)
    assert result.returncode != 0 and message in result.stderr, result.stderr[-500:]


@override_settings(METRICS_ALERT_TTFT_P95_MS=5000)
def test_a_lane_with_no_first_token_for_longer_than_the_window_keeps_its_alert_until_idle(lane: Lane) -> None:
    """The case the held rule is still for: requests running, not one first token in the
    whole window, so no TTFT sample at all; the lane has not recovered."""
    engine = Engine()
    tick(lane, engine, 0)
    engine.observe(TTFT, 39.0)
    assert tick(lane, engine, 5)["ttft_p95_ms"] > 5000
    alert = Alert.objects.get()
    assert alert.state == "open"
    for t in range(10, 130, 5):  # stuck: three requests running, no first token for 2 minutes
        figures = tick(lane, engine, t)
    assert "ttft_p95_ms" not in figures and figures["running"] == 3.0
    alert.refresh_from_db()
    assert alert.state == "open" and Alert.objects.count() == 1
    engine.reading.gauges["vllm:num_requests_running"] = 0.0  # idle: nothing waits any more
    tick(lane, engine, 130)
    alert.refresh_from_db()
    assert alert.state == "resolved"


def test_after_a_scrape_gap_longer_than_the_window_it_runs_from_the_last_reading(lane: Lane) -> None:
    """Seen in the browser test: a scrape a second after the last one keeps no snapshot of
    its own (at most one per window/12 s), so after a gap the window began before it and
    counted slow first tokens that reading had already seen."""
    engine = Engine()
    tick(lane, engine, 0)
    engine.observe(TTFT, 39.0, n=2)
    assert tick(lane, engine, 1)["ttft_p95_ms"] > 30_000  # a scrape one second later
    engine.observe(TTFT, 0.05, n=3)  # the lane unreachable for two minutes, then fast again
    figures = tick(lane, engine, 130)
    assert figures["ttft_p95_ms"] < 100

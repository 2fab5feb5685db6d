"""What the percentile window costs a scrape: per lane, the figures' CPU and the state kept
between scrapes (ScrapeTarget.reading, written every tick), with the window (a minute of
snapshots) beside the per-interval baseline (the previous reading alone), in the same run.

    .venv/bin/python perf/percentile_window.py [--lanes 50] [--ticks 40] [--db-rounds 20]

CPU: services._figures, the tick's per-target step from the stored JSON to the figures and
the JSON to store. Write: the tick's upsert of the lanes' ScrapeTarget rows (as
services.tick_record does it) with each state, alternating, in DATABASE_URL's database
(migrated; it writes rows named bench-window-* and deletes them after).
Prints figures; asserts nothing about speed."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

from django.conf import settings  # noqa: E402

from core.stats import percentile_nearest_rank  # noqa: E402
from metrics.parsing import TTFT, EngineReading, lane_figures, parse_vllm_metrics  # noqa: E402
from metrics.scraper import ScrapeResult  # noqa: E402
from metrics.services import _figures  # noqa: E402

PAGE = Path(__file__).resolve().parent.parent / "tests" / "metrics" / "data" / "vllm_metrics.txt"


def readings(ticks: int) -> list[EngineReading]:
    base = parse_vllm_metrics(PAGE.read_text(), at=1_700_000_000.0)
    out = []
    for i in range(ticks):
        reading = EngineReading.from_json({**base.to_json(), "at": base.at + 5 * i})
        for histogram in reading.histograms.values():
            for bound in histogram:
                histogram[bound] += 3 * i  # a few observations a tick in every bucket
        reading.histograms[TTFT] = {b: c + i for b, c in reading.histograms[TTFT].items()}
        out.append(reading)
    return out


def upsert_cost(lanes: int, rounds: int, windowed: dict, baseline: dict) -> None:
    from django.db import transaction

    from metrics.models import ScrapeTarget

    def write(state: dict) -> float:
        rows = [ScrapeTarget(kind="lane", target=f"bench-window-{i}", ok=True, reading=state, figures={})
                for i in range(lanes)]
        started = time.perf_counter()
        with transaction.atomic():
            ScrapeTarget.objects.bulk_create(rows, update_conflicts=True, unique_fields=["kind", "target"],
                                             update_fields=["ok", "reading", "figures"])
        return time.perf_counter() - started

    times: dict[str, list[float]] = {"window": [], "baseline": []}
    try:
        for _ in range(rounds):
            times["window"].append(write(windowed))
            times["baseline"].append(write(baseline))
    finally:
        ScrapeTarget.objects.filter(target__startswith="bench-window-").delete()
    # Nearest rank, as every timing of the portal's own in perf/: an observed upsert.
    med = {k: (percentile_nearest_rank(v, 0.5) or 0.0) * 1000 for k, v in times.items()}
    print(f"  upsert of {lanes} lanes' state, median of {rounds}: window {med['window']:.1f} ms, "
          f"baseline {med['baseline']:.1f} ms (x{med['window'] / med['baseline']:.2f})")


def run(lanes: int, ticks: int, db_rounds: int) -> None:
    series = readings(ticks)
    windowed_cpu = baseline_cpu = 0.0
    windowed_bytes = baseline_bytes = 0
    for _ in range(lanes):
        state: dict | None = None  # as stored: a JSON round trip (the JSONField) every tick
        stored: dict | None = None
        for reading in series:
            started = time.process_time()
            figures, kept = _figures(ScrapeResult("lane", "l", reading, "", 1.0), state)
            text = json.dumps(kept)
            state = json.loads(text)
            windowed_cpu += time.process_time() - started
            windowed_bytes = len(text)
            started = time.process_time()
            previous = EngineReading.from_json(stored) if stored else None
            lane_figures(previous, reading)
            text = json.dumps(reading.to_json())
            stored = json.loads(text)
            baseline_cpu += time.process_time() - started
            baseline_bytes = len(text)
        assert "ttft_p95_ms" in figures
    per_tick = lanes
    print(f"{lanes} lanes x {ticks} ticks, window {settings.METRICS_PERCENTILE_WINDOW_S:g} s, "
          f"snapshots kept per lane {len(state['window']) if state else 0}")
    print(f"  state per lane (JSON): window {windowed_bytes} B, per-interval baseline {baseline_bytes} B "
          f"(x{windowed_bytes / baseline_bytes:.2f}); per tick for {lanes} lanes: "
          f"{windowed_bytes * lanes / 1024:.0f} KiB vs {baseline_bytes * lanes / 1024:.0f} KiB")
    print(f"  CPU per tick for {lanes} lanes: window {1000 * windowed_cpu / ticks:.1f} ms, "
          f"baseline {1000 * baseline_cpu / ticks:.1f} ms (x{windowed_cpu / baseline_cpu:.2f}); "
          f"per lane {1000 * windowed_cpu / ticks / per_tick:.2f} ms vs {1000 * baseline_cpu / ticks / per_tick:.2f} ms")
    if db_rounds and state and stored:
        upsert_cost(lanes, db_rounds, state, stored)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--lanes", type=int, default=50)
    parser.add_argument("--ticks", type=int, default=40)
    parser.add_argument("--db-rounds", type=int, default=20, help="0: skip the database write")
    args = parser.parse_args()
    print("load average (1, 5, 15 min): " + ", ".join(f"{x:.2f}" for x in os.getloadavg()))
    run(args.lanes, args.ticks, args.db_rounds)

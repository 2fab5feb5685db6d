"""Replay of a request-log window: the recorded arrival pattern sent on a fixed schedule (at
1x or scaled), each request's recorded token counts, goodput against the admin's SLOs and
results per time slice."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError

from benchmarks.loadgen import LevelPlan, LevelResult, Target, filler_text, level_client, run_level
from benchmarks.models import BenchmarkLevel
from benchmarks.selectors import export_rows, replay_trace
from benchmarks.services import benchmark_start
from benchmarks.stats import RequestRecord, Slo, level_stats, time_slices
from gateway.models import RequestLog
from jobs.models import JobLogLine
from lanes.models import Lane
from sparksim.inprocess import engine_config, serving
from sparksim.virtual_clock import run_on_virtual_clock
from tests.benchmarks.conftest import SERVED, start_and_run
from tests.conftest import SIM_QWEN

SINCE = datetime(2026, 11, 24, 14, 0, tzinfo=UTC)  # "last Tuesday's peak"
# Recorded arrivals (s after SINCE), bursts and gaps, with their prompt and output tokens.
ARRIVALS = [(0.010, 40, 4), (0.012, 120, 6), (0.013, 60, 3), (0.250, 30, 5), (0.600, 200, 8),
            (0.601, 50, 4), (0.602, 50, 4), (0.900, 80, 2), (1.400, 20, 7), (1.405, 90, 5)]


def _log(at: float, prompt: int | None, output: int | None, *, lane: str = "qwen", status: int = 200,
         arrived: bool = True) -> None:
    received = SINCE + timedelta(seconds=at)
    RequestLog.objects.create(request_id=f"r{at}", endpoint="chat.completions", lane=lane, status=status,
                              prompt_tokens=prompt, completion_tokens=output, latency_ms=5.0,
                              received_at=received if arrived else None, created_at=received + timedelta(seconds=1))


def _recorded_window() -> dict[str, Any]:
    for at, prompt, output in reversed(ARRIVALS):  # written out of order: the trace sorts by arrival
        _log(at, prompt, output)
    _log(0.3, 10, 2, status=503)  # failed: not replayed
    _log(0.4, 10, 2, arrived=False)  # logged before arrival times were kept
    _log(0.5, 10, 2, lane="other")  # another lane's traffic
    _log(3.0, 10, 2)  # after the window
    return {"since": SINCE.isoformat(), "until": (SINCE + timedelta(seconds=2)).isoformat(), "lane": "qwen",
            "speed": 1.0}


def test_the_trace_is_the_windows_answered_requests_in_arrival_order(db: None) -> None:
    window = _recorded_window()
    trace = replay_trace(window)
    assert trace.offsets_s == pytest.approx([at for at, _, _ in ARRIVALS], abs=1e-6)
    assert trace.prompt_tokens == tuple(prompt for _, prompt, _ in ARRIVALS)
    assert trace.output_tokens == tuple(output for _, _, output in ARRIVALS)
    assert trace.skipped == 2  # the failed row and the row without an arrival time (written in the window)
    twice = replay_trace({**window, "speed": 2.0})
    assert twice.offsets_s == pytest.approx([at / 2 for at, _, _ in ARRIVALS], abs=1e-6)
    assert len(replay_trace({**window, "lane": None})) == len(ARRIVALS) + 1  # every lane's


def test_a_replay_offers_the_recorded_arrival_pattern(db: None) -> None:
    trace = replay_trace(_recorded_window())

    async def go() -> LevelResult:
        async with serving(engine_config(SIM_QWEN, "--served-model-name", SERVED)) as url, \
                level_client(None, httpx.Timeout(7200.0)) as client:
            plan = LevelPlan(concurrency=None, request_rate=None, requests=len(trace), duration_s=None,
                             output_tokens=1, timeout_s=7200.0, schedule=trace.offsets_s)

            async def prompt_for(index: int) -> str:
                return filler_text(trace.prompt_tokens[index], f"replay-{index}")

            return await run_level(client, Target("direct", url, SERVED), plan, prompt_for,
                                   output_for=lambda index: trace.output_tokens[index])

    # On sparksim's simulated clock: the figures do not depend on the machine's load.
    result = run_on_virtual_clock(go())
    stats = result.stats()
    assert stats["completed"] == len(ARRIVALS)
    for sent, (at, _, _) in zip(stats["sent_s"], ARRIVALS, strict=True):
        assert abs(sent - at) < 0.005  # within a few ms of the recorded arrival
    assert stats["schedule_s"] == pytest.approx([at for at, _, _ in ARRIVALS], abs=1e-6)
    assert [record.output_tokens for record in result.records] == [output for _, _, output in ARRIVALS]


def _record(scheduled: float, sent: float, first: float, last: float, tokens: int, error: str = "") -> RequestRecord:
    chunks = [first + (last - first) * index / (tokens - 1) for index in range(tokens)] if not error else []
    return RequestRecord(sent_at=sent, scheduled_at=scheduled, chunk_times=chunks, chunk_tokens=[1] * len(chunks),
                         output_tokens=tokens if not error else 0, error=error)


def test_goodput_on_a_constructed_trace_matches_a_hand_count() -> None:
    # SLOs: TTFT 500 ms (from the schedule), TPOT 50 ms.
    records = [
        _record(0.0, 0.0, 0.2, 0.2 + 9 * 0.04, 10),  # good: 200 ms, 40 ms
        _record(0.5, 0.5, 1.1, 1.1 + 9 * 0.03, 10),  # TTFT 600 ms: not good
        _record(1.0, 1.6, 1.7, 1.7 + 9 * 0.02, 10),  # 100 ms from its send, 700 ms from tᵢ: not good
        _record(1.5, 1.5, 1.9, 1.9 + 9 * 0.06, 10),  # TPOT 60 ms: not good
        _record(2.0, 2.0, 2.0, 0.0, 0, error="HTTP 503: busy"),  # failed: not good, still counted
        _record(2.5, 2.5, 2.95, 2.95 + 4 * 0.045, 5),  # 450 ms, 45 ms: good
        _record(3.2, 3.2, 3.3, 3.3 + 9 * 0.01, 10),  # good
    ]
    slo = Slo(ttft_s=0.5, tpot_s=0.05)
    stats = level_stats(records, started_at=0.0, ended_at=4.0, slo=slo, slice_s=1.0)
    assert stats["good_requests"] == 3
    assert stats["goodput_share"] == pytest.approx(3 / 7)
    assert stats["request_goodput"] == pytest.approx(3 / 4.0)
    assert stats["slo"] == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    # Per second of the schedule: [0, 1) has 2 requests (1 good), [1, 2) 2 (0), [2, 3) 2 (1, one failed), [3, 4) 1 (1).
    slices = stats["slices"]
    assert [(row["requests"], row["failed"], row["good_requests"]) for row in slices] == [
        (2, 0, 1), (2, 0, 0), (2, 1, 1), (1, 0, 1)]
    assert slices[1]["median_ttft_ms"] == pytest.approx((700 + 400) / 2)  # from the schedule
    assert time_slices(records, 0.0, 2.0)[0]["requests"] == 4 and "good_requests" not in time_slices(records, 0.0, 2.0)[0]
    assert "good_requests" not in level_stats(records, started_at=0.0, ended_at=4.0)


def test_a_replay_job_runs_the_window_on_each_target_with_goodput_and_slices(
        bench_lane: Lane, admin_user: User, dispatched: list[int]) -> None:
    window = _recorded_window()
    run = start_and_run(bench_lane, admin_user, dispatched, replay=window, slo_ttft_ms=60_000, slo_tpot_ms=10_000,
                        slice_s=0.5)
    (level,) = BenchmarkLevel.objects.filter(run=run)
    stats = level.stats
    assert level.level_label == "replay" and stats["completed"] == len(ARRIVALS)
    assert stats["schedule_s"] == pytest.approx([at for at, _, _ in ARRIVALS], abs=1e-5)
    assert all(sent >= at for sent, at in zip(stats["sent_s"], stats["schedule_s"], strict=True))
    assert stats["total_output_tokens"] == sum(output for _, _, output in ARRIVALS)
    assert stats["good_requests"] == len(ARRIVALS)  # bounds no sparksim request comes near
    assert [row["requests"] for row in stats["slices"]] == [4, 4, 2]  # per half second of the schedule
    header, row = export_rows(run)
    exported = dict(zip(header, row, strict=True))
    assert exported["goodput_share"] == 1.0 and exported["median_ttft_from_schedule_ms"] >= exported["median_ttft_ms"]
    assert exported["request_rate"] == pytest.approx(stats["scheduled_request_rate"]) and exported["max_concurrency"] is None
    log = "\n".join(JobLogLine.objects.filter(job=run.job).values_list("text", flat=True))
    assert f"replaying {len(ARRIVALS)} requests" in log and "synthetic text of their recorded length" in log


def test_a_replay_of_an_empty_or_bad_window_is_refused_naming_the_field(bench_lane: Lane, admin_user: User,
                                                                         dispatched: list[int]) -> None:
    empty = {"since": "2026-01-01T00:00:00+00:00", "until": "2026-01-01T01:00:00+00:00"}
    with pytest.raises(ValidationError) as refused:
        benchmark_start(lane=bench_lane, user=admin_user, params={"replay": empty})
    assert "no answered request" in str(refused.value.message_dict["replay"])
    for bad, field, words in (
        ({"replay": {"since": "yesterday", "until": "2026-01-01T01:00:00+00:00"}}, "replay", "since must be"),
        ({"replay": {**empty, "until": "2026-01-03T00:00:00+00:00"}}, "replay", "at most a day"),
        ({"replay": {**empty, "speed": 0}}, "replay", "speed must be"),
        ({"replay": {**empty, "extra": 1}}, "replay", "unknown field 'extra'"),
        ({"replay": empty, "concurrency": [1]}, "concurrency", "leave it out"),
        ({"replay": empty, "slo_ttft_ms": -1}, "slo_ttft_ms", "between"),
    ):
        with pytest.raises(ValidationError) as refused:
            benchmark_start(lane=bench_lane, user=admin_user, params=bad)
        assert words in str(refused.value.message_dict[field]), (bad, refused.value.message_dict)
    assert dispatched == []


def test_a_replayed_conversations_turns_share_a_prefix_as_the_real_ones_did(
        bench_lane: Lane, admin_user: User, dispatched: list[int]) -> None:
    """Turns of one conversation (the gateway's digest of its first messages) are cut from one
    synthetic text, so the lane's prefix cache meets them as it met the real turns; requests
    of no conversation share nothing."""
    for index, prompt in enumerate((300, 600, 900, 1200)):  # a conversation growing turn by turn
        received = SINCE + timedelta(seconds=0.2 * index)
        RequestLog.objects.create(request_id=f"turn{index}", endpoint="chat.completions", lane="qwen", status=200,
                                  prompt_tokens=prompt, completion_tokens=2, latency_ms=5.0, received_at=received,
                                  created_at=received, conversation="a" * 32)
    window = {"since": SINCE.isoformat(), "until": (SINCE + timedelta(seconds=2)).isoformat(), "lane": "qwen",
              "speed": 1.0}
    trace = replay_trace(window)
    assert trace.conversation_count == 1 and trace.prompt_tag(0) == trace.prompt_tag(3) == "c" + "a" * 32
    run = start_and_run(bench_lane, admin_user, dispatched, replay=window)
    (level,) = BenchmarkLevel.objects.filter(run=run)
    shared = level.metrics["prefix_cache_hit_rate"]
    # Turns 2-4 find the earlier turn's blocks: 300 + 600 + 900 of 3,000 tokens at most.
    assert shared is not None and 0.3 < shared <= 0.6, level.metrics
    log = "\n".join(JobLogLine.objects.filter(job=run.job).values_list("text", flat=True))
    assert "the turns of each of the 1 conversations sharing" in log

    RequestLog.objects.filter(request_id__startswith="turn").update(conversation="")
    alone = start_and_run(bench_lane, admin_user, dispatched, replay=window)
    (level,) = BenchmarkLevel.objects.filter(run=alone)
    assert (level.metrics["prefix_cache_hit_rate"] or 0.0) < 0.05, level.metrics


def test_a_replay_sends_stored_prompts_again_as_they_were(bench_lane: Lane, admin_user: User,
                                                          dispatched: list[int]) -> None:
    """Requests of keys that store prompts are sent again with their stored text, so the prefix
    they share is the real one (here two agents' requests with one long system prompt and no
    conversation digest in common); the others stay synthetic."""
    system = "You are the repository's review agent. " * 60
    for index, (text, prompt) in enumerate(((system + "Review file a.py", 500), (system + "Review file b.py", 500),
                                            ("", 300))):
        received = SINCE + timedelta(seconds=0.3 * index)
        RequestLog.objects.create(request_id=f"stored{index}", endpoint="chat.completions", lane="qwen", status=200,
                                  prompt_tokens=prompt, completion_tokens=2, latency_ms=5.0, received_at=received,
                                  created_at=received, prompt_text=text)
    window = {"since": SINCE.isoformat(), "until": (SINCE + timedelta(seconds=2)).isoformat(), "lane": "qwen",
              "speed": 1.0}
    trace = replay_trace(window)
    assert trace.stored_count == 2 and trace.text(0).endswith("a.py") and trace.text(2) == ""
    run = start_and_run(bench_lane, admin_user, dispatched, replay=window)
    (level,) = BenchmarkLevel.objects.filter(run=run)
    assert (level.metrics["prefix_cache_hit_rate"] or 0.0) > 0.2, level.metrics  # b.py found a.py's blocks
    log = "\n".join(JobLogLine.objects.filter(job=run.job).values_list("text", flat=True))
    assert "2 prompts sent again as stored" in log

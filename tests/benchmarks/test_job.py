"""The benchmark job kind against a sparksim engine over HTTP, under the one job runner."""

from __future__ import annotations

from django.contrib.auth.models import User

from benchmarks.models import BenchmarkRun
from jobs.models import JobState
from lanes.models import Lane
from tests.benchmarks.conftest import start_and_run


def test_a_sweep_saves_every_level_with_the_lane_revision(bench_lane: Lane, admin_user: User,
                                                          dispatched: list[int]) -> None:
    run = start_and_run(bench_lane, admin_user, dispatched, concurrency=[1, 4], prompt_tokens=300,
                        output_tokens=16)
    assert run.job.state == JobState.SUCCEEDED, run.job.error
    assert run.revision_number == 1
    levels = list(run.levels.order_by("position"))
    assert [(level.target, level.concurrency) for level in levels] == [("direct", 1), ("direct", 4)]
    for level in levels:
        assert level.stats["completed"] == level.concurrency and level.stats["failed"] == 0
        assert level.stats["total_output_tokens"] == 16 * level.concurrency
        # The lane's own counters over the level: every prompt token of the level was queried.
        assert level.metrics["counters"]["vllm:generation_tokens"] == 16 * level.concurrency
        assert 300 * level.concurrency * 0.95 <= level.metrics["counters"]["vllm:prompt_tokens"]
    assert isinstance(BenchmarkRun.objects.get(pk=run.pk).params["concurrency"], list)

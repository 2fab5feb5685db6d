"""A benchmark level's /metrics deltas end to end: a benchmark job against a sparksim engine
serving with speculative decoding (vLLM's spec-decode counters) and prefix caching; the
level's figures come from the counters' change over that level only, by vLLM's formulas."""

from __future__ import annotations

from typing import Any

import httpx
import pytest
from django.contrib.auth.models import User
from prometheus_client.parser import text_string_to_metric_families

from jobs.models import JobState
from sparksim.standalone import EngineHandle
from tests.benchmarks.conftest import SERVED, lane_for, start_and_run
from tests.conftest import SIM_QWEN

SPEC_TOKENS = 3
ACCEPTANCE = 0.7


def engine_counter(engine: EngineHandle, name: str) -> float:
    text = httpx.get(f"{engine.url}/metrics").text
    return sum(sample.value for family in text_string_to_metric_families(text) for sample in family.samples
               if sample.name == name)


@pytest.fixture
def spec_engine(engine_factory: Any) -> EngineHandle:
    return engine_factory(SIM_QWEN, "--served-model-name", SERVED, "--speculative-config",
                          f'{{"method":"ngram","num_speculative_tokens":{SPEC_TOKENS}}}',
                          "--sim-spec-acceptance", str(ACCEPTANCE), time_scale=0.001)


def test_speculative_acceptance_over_each_level(transactional_db: None, spec_engine: EngineHandle,
                                               admin_user: User, dispatched: list[int]) -> None:
    # Traffic before the run must not leak into the level's figures.
    body = {"model": SERVED, "prompt": "before the run", "max_tokens": 50, "ignore_eos": True}
    httpx.post(f"{spec_engine.url}/v1/completions", json=body, timeout=60).raise_for_status()
    drafts_before = engine_counter(spec_engine, "vllm:spec_decode_num_drafts_total")
    assert drafts_before > 0

    lane = lane_for(spec_engine, "spec")
    run = start_and_run(lane, admin_user, dispatched, concurrency=[1, 4], prompt_tokens=200, output_tokens=61)
    assert run.job.state == JobState.SUCCEEDED, run.job.error
    drafts_in_levels = 0.0
    for level in run.levels.order_by("position"):
        delta = level.metrics
        counters = delta["counters"]
        requests = level.concurrency
        assert counters["vllm:generation_tokens"] == 61 * requests
        drafts = counters["vllm:spec_decode_num_drafts"]
        draft_tokens = counters["vllm:spec_decode_num_draft_tokens"]
        accepted = counters["vllm:spec_decode_num_accepted_tokens"]
        drafts_in_levels += drafts
        assert draft_tokens == SPEC_TOKENS * drafts
        # Each draft yields its accepted tokens plus one: the level's 60 decode tokens per
        # request (the first comes from the prefill), give or take the draft open at either end.
        assert abs(drafts + accepted - 60 * requests) <= SPEC_TOKENS + 1
        # vLLM's formulas on the deltas, as bench serve prints them.
        assert delta["spec_acceptance_rate"] == pytest.approx(accepted / draft_tokens)
        assert delta["spec_mean_acceptance_length"] == pytest.approx(1 + accepted / drafts)
        assert delta["spec_acceptance_rate"] == pytest.approx(ACCEPTANCE, abs=0.08)
        assert delta["spec_mean_acceptance_length"] == pytest.approx(1 + SPEC_TOKENS * ACCEPTANCE, abs=0.25)
        per_position = [counters[f"vllm:spec_decode_num_accepted_tokens_per_pos[{p}]"] for p in range(SPEC_TOKENS)]
        assert sum(per_position) == accepted
        assert per_position[0] >= per_position[1] >= per_position[2] > 0  # later positions accepted less
        assert delta["spec_acceptance_per_position"] == pytest.approx([count / drafts for count in per_position])
        assert delta["reset"] == [] and delta["preemptions"] == 0
    # The levels' drafts are the engine's drafts since the run began, nothing before it.
    total = engine_counter(spec_engine, "vllm:spec_decode_num_drafts_total")
    assert drafts_in_levels <= total - drafts_before


def test_an_engine_without_speculation_reports_none(bench_lane: Any, admin_user: User,
                                                   dispatched: list[int]) -> None:
    run = start_and_run(bench_lane, admin_user, dispatched, concurrency=[2], prompt_tokens=64, output_tokens=8)
    (level,) = run.levels.all()
    assert level.metrics["spec_acceptance_rate"] is None and level.metrics["spec_mean_acceptance_length"] is None
    assert level.metrics["spec_acceptance_per_position"] is None


def test_a_cache_hit_level_shows_its_prefix_cache_hits(bench_lane: Any, admin_user: User,
                                                      dispatched: list[int]) -> None:
    """Prime then repeat: the level's prompts hit the blocks the priming request cached; a
    cold level's unique prompts do not."""
    hit = start_and_run(bench_lane, admin_user, dispatched, concurrency=[4], prompt_tokens=2000, output_tokens=4,
                        cache_mode="cache_hit")
    cold = start_and_run(bench_lane, admin_user, dispatched, concurrency=[4], prompt_tokens=2000, output_tokens=4)
    assert hit.levels.get().metrics["prefix_cache_hit_rate"] > 0.9
    assert cold.levels.get().metrics["prefix_cache_hit_rate"] < 0.1


def test_a_level_that_outgrows_the_kv_pool_counts_its_preemptions(transactional_db: None, engine_factory: Any,
                                                                 admin_user: User, dispatched: list[int]) -> None:
    """Four streams whose outputs together outgrow a 512-token KV pool: the engine preempts
    (vllm:num_preemptions) and the level says how often; every request still completes."""
    # Real time (scale 1): each answer takes ~2 s, so the four streams of the level overlap
    # however loaded the machine is, and together they must outgrow the pool.
    engine = engine_factory(SIM_QWEN, "--served-model-name", SERVED, "--kv-cache-memory-bytes", "16M",
                            "--max-model-len", "512", time_scale=1.0)
    lane = lane_for(engine, "tight")
    run = start_and_run(lane, admin_user, dispatched, concurrency=[1, 4], prompt_tokens=64, output_tokens=200)
    alone, crowded = run.levels.order_by("position")
    assert alone.metrics["preemptions"] == 0
    assert crowded.metrics["preemptions"] >= 1
    assert crowded.stats["completed"] == 4 and crowded.stats["total_output_tokens"] == 800

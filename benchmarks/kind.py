"""The benchmark job kind: a sweep of levels against a lane, directly and/or through the
gateway, each level saved and broadcast as it ends. Runs under the one job runner (live log,
cancel, time limit)."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from django.conf import settings
from django.contrib.auth.models import AnonymousUser
from django.utils import timezone

from benchmarks.client_load import ClientLoad
from benchmarks.loadgen import (
    LevelPlan,
    LevelResult,
    Target,
    filler_text,
    level_client,
    run_level,
    sized_prompt,
    stream_one,
)
from benchmarks.models import BenchmarkLevel, BenchmarkRun
from benchmarks.params import Level, plan_levels
from benchmarks.promdelta import ROCE_SCRIPT, metrics_delta, parse_roce, roce_delta
from benchmarks.records import run_for_job
from benchmarks.selectors import Trace, level_payload, replay_trace
from benchmarks.services import run_key_name
from benchmarks.stats import RequestRecord, Slo
from core.broadcast import abroadcast, broadcast
from core.http import async_http_client
from gateway.models import ApiKey
from gateway.services import api_key_create, api_key_revoke
from jobs.logsink import job_group
from jobs.models import StepState
from jobs.runner import JobContext, JobFailed
from jobs.transports import TransportError
from lanes.models import Lane

PROGRESS_EVERY_S = 0.25
KEY_GRACE_S = 300


REPLAY_SLICE_S = 60.0  # a replay's time slices unless slice_s says otherwise


def _level_requests(params: dict[str, Any], level: Level, trace: Trace | None) -> int | None:
    if trace is not None:
        return len(trace)
    if params.get("duration_s"):
        return None
    return int(params.get("requests_per_level") or level.concurrency or 1)


def _lane_targets(lane: Lane, secret: str | None) -> dict[str, Target]:
    targets = {"direct": Target("direct", lane.base_url(), lane.public_model_name)}
    if secret is not None:
        targets["gateway"] = Target("gateway", settings.GATEWAY_URL.rstrip("/"), lane.name,
                                    {"Authorization": f"Bearer {secret}"})
    return targets


async def _scrape(client: httpx.AsyncClient, url: str) -> str:
    try:
        response = await client.get(f"{url}/metrics")
        return response.text if response.status_code == 200 else ""
    except httpx.HTTPError:
        return ""


@dataclass
class LevelOutcome:
    result: LevelResult
    metrics_before: str
    metrics_after: str
    prime: dict[str, Any]


def _fresh_prompts(tokens: int, ratio_prompt: str, tag: str, trace: Trace | None) -> Callable[[int], Awaitable[str]]:
    """A level's prompts: a fresh tag in front of every one, so no request shares a cached
    block. A replayed request: its stored prompt, or synthetic text of its recorded length
    (warm-up: the run's), the turns of one conversation cut from one text (filler_text
    extends a tag's text), so they share its beginning as the real turns did."""
    ratio = len(ratio_prompt) / max(tokens, 1)

    async def prompt_for(index: int) -> str:
        if trace is not None and index >= 0:
            return trace.text(index) or filler_text(trace.prompt_tokens[index], f"{tag}-{trace.prompt_tag(index)}", ratio)
        return filler_text(tokens, f"{tag}-{index}", ratio)

    return prompt_for


async def _run_one_level(ctx_job_id: int, params: dict[str, Any], targets: dict[str, Target], level: Level,
                         total_levels: int, ratio_prompt: str, run_tag: str, trace: Trace | None) -> LevelOutcome:
    direct = targets["direct"]
    target = targets[level.target]
    timeout = httpx.Timeout(params["timeout_s"], connect=10.0)
    async with level_client(level.concurrency, timeout) as client:
        prime: dict[str, Any] = {}
        tokens = int(params["prompt_tokens"])
        output = int(params["output_tokens"])
        prompt_for: Callable[[int], Awaitable[str]]
        if params["cache_mode"] == "cache_hit":
            shared = ratio_prompt

            async def shared_prompt(index: int) -> str:  # noqa: ARG001 (every prompt is the shared one)
                return shared

            prompt_for = shared_prompt
            # Prime then repeat: the first request fills the prefix cache, the level reuses it.
            record, _ = await stream_one(client, target, shared, output, params["timeout_s"], ClientLoad())
            prime = {"ttft_ms": record.ttft * 1000 if record.ok else None,
                     "decode_tok_s": record.decode_tok_s if record.ok else None, "error": record.error}
        else:
            prompt_for = _fresh_prompts(tokens, ratio_prompt, f"{run_tag}-{level.position}", trace)

        before = await _scrape(client, direct.base_url)
        loop = asyncio.get_running_loop()
        planned = _level_requests(params, level, trace)
        last_sent = [0.0]
        sending: set[asyncio.Task[None]] = set()  # held until sent: the loop keeps only weak references

        def progress(done: int) -> None:
            now = time.monotonic()
            if now - last_sent[0] < PROGRESS_EVERY_S and done != planned:
                return
            last_sent[0] = now
            task = loop.create_task(abroadcast(job_group(ctx_job_id), "benchmark.progress", {
                "job": ctx_job_id, "position": level.position, "levels": total_levels,
                "done": done, "planned": planned,
            }))
            sending.add(task)
            task.add_done_callback(sending.discard)

        plan = LevelPlan(concurrency=level.concurrency, request_rate=level.request_rate, requests=planned,
                         duration_s=params.get("duration_s"), output_tokens=output,
                         timeout_s=float(params["timeout_s"]), idle_timeout_s=params.get("idle_timeout_s"),
                         warmup=int(params["warmup"]), seed=level.position,
                         schedule=trace.offsets_s if trace is not None else None)
        output_for = (lambda index: trace.output_tokens[index]) if trace is not None else None
        result = await run_level(client, target, plan, prompt_for, on_request=progress, output_for=output_for)
        await asyncio.gather(*sending, return_exceptions=True)  # a lost progress message fails nothing
        after = await _scrape(client, direct.base_url)
    return LevelOutcome(result, before, after, prime)


async def _check_paths(targets: dict[str, Target], timeout_s: float, tag: str) -> dict[str, RequestRecord]:
    """One one-token request per target before the first level, not measured (as `vllm bench
    serve`'s initial test run). Through the gateway the first request of a run pays one-time
    costs no later one does: the run's new key is looked up, and a gateway that has served
    nothing yet opens its connections (Redis, the lane) on it. Measured in level 1 they read
    as the gateway's added TTFT (58 ms at C=1 against 4 ms at C=2 in the suite's run)."""
    records: dict[str, RequestRecord] = {}
    async with async_http_client(timeout=httpx.Timeout(timeout_s, connect=10.0)) as client:
        for name, target in targets.items():
            records[name], _ = await stream_one(client, target, f"path check {tag}", 1, timeout_s, ClientLoad())
    return records


async def _calibrate(params: dict[str, Any], direct: Target, tag: str) -> str:
    async with async_http_client(timeout=httpx.Timeout(60.0)) as client:
        return await sized_prompt(client, direct, int(params["prompt_tokens"]), tag)


def _read_roce(ctx: JobContext, lane: Lane) -> dict[str, dict[str, int]]:
    counters: dict[str, dict[str, int]] = {}
    for node in lane.ranked_nodes():
        try:
            result = ctx.run(ctx.endpoint(node), "bash -s", stdin=ROCE_SCRIPT, capture=True, quiet=True, timeout_s=20)
        except TransportError as exc:
            ctx.log(f"RoCE counters unreadable: {exc}", node=node.name, stream="stderr")
            continue
        counters.update(parse_roce(node.name, result.stdout))
    return counters


def _summary(level: Level, stats: dict[str, Any]) -> str:
    name = (f"C={level.concurrency}" if level.concurrency is not None
            else f"{level.request_rate:g} req/s" if level.request_rate is not None else "replay")
    return (f"{level.target} {name}: {stats['completed']}/{stats['total']} ok, "
            f"TTFT p50 {stats['median_ttft_ms'] / 1000:.3f} s p95 {stats['p95_ttft_ms'] / 1000:.3f} s, "
            f"TPOT {stats['mean_tpot_ms']:.1f} ms, decode p50 {stats['median_decode_tok_s']:.2f} tok/s, "
            f"output {stats['output_throughput']:.2f} tok/s" + _schedule_summary(stats))


def _schedule_summary(stats: dict[str, Any]) -> str:
    if "achieved_request_rate" not in stats:
        return ""
    return (f"; sent {stats['achieved_request_rate']:.2f} req/s (schedule {stats['scheduled_request_rate']:.2f}), "
            f"dispatch delay p95 {stats['p95_dispatch_delay_ms']:.1f} ms, from the schedule: "
            f"TTFT p50 {stats['median_ttft_from_schedule_ms'] / 1000:.3f} s, "
            f"E2E p50 {stats['median_e2el_from_schedule_ms'] / 1000:.3f} s"
            + (f"; goodput {stats['goodput_share']:.1%} of requests within the SLOs" if "goodput_share" in stats
               else ""))


def run_benchmark(ctx: JobContext) -> dict[str, Any]:
    run = run_for_job(ctx.job)
    lane = run.lane
    if lane is None or not lane.ranked_nodes():
        raise JobFailed("the lane is gone or has no nodes")
    params = run.params
    levels = plan_levels(params)
    steps = ctx.declare_steps([
        (f"level.{level.position}", "benchmark", "",
         f"{level.target}: " + (f"concurrency {level.concurrency}" if level.concurrency is not None
                                else f"{level.request_rate:g} requests/s" if level.request_rate is not None
                                else "replay of the request log"))
        for level in levels
    ])
    actor = ctx.job.created_by or AnonymousUser()
    key, secret = _run_key(ctx, lane, params, actor)
    targets = _lane_targets(lane, secret)
    run_tag = uuid.uuid4().hex[:12]
    saturated: list[int] = []
    flagged: list[int] = []
    completed = 0
    errors: set[str] = set()
    trace = _replay_logged(ctx, params)
    try:
        ratio_prompt = ctx.wait(_calibrate(params, targets["direct"], f"{run_tag}-shared"))
        _check_paths_logged(ctx, targets, float(params["timeout_s"]), run_tag)
        ctx.log(f"prompts of {params['prompt_tokens']} tokens ({params['cache_mode']}), "
                f"{params['output_tokens']} output tokens each (max_tokens + min_tokens + ignore_eos)")
        for level, step in zip(levels, steps, strict=True):
            with ctx.step(step):
                roce_before = _read_roce(ctx, lane)
                outcome = ctx.wait(_run_one_level(ctx.job.pk, params, targets, level, len(levels), ratio_prompt,
                                                  run_tag, trace))
                stats = _record_level(ctx, run, level, outcome, roce_before, _read_roce(ctx, lane))
                completed += stats["completed"]
                errors.update(stats["errors"])
                if _client_saturated(ctx, step, stats):
                    saturated.append(level.position)
                if _level_flagged(ctx, step, stats):
                    flagged.append(level.position)
    finally:
        if key is not None:
            api_key_revoke(actor=actor, key=key)
    if not completed:
        # Every level is saved with its failures; a sweep where nothing answered still fails.
        raise JobFailed("no request succeeded: " + "; ".join(sorted(errors))[:1000])
    return {"levels": len(levels), "client_saturated_levels": saturated, "flagged_levels": flagged}


def _replay_logged(ctx: JobContext, params: dict[str, Any]) -> Trace | None:
    """A replay's window, read once for every level (each target replays the same trace)."""
    replay = params.get("replay")
    if not replay:
        return None
    trace = replay_trace(replay)
    if not trace:
        raise JobFailed("the replay window holds no answered request with its arrival time and token counts")
    ctx.log(f"replaying {len(trace)} requests logged from {replay['since']} to {replay['until']}"
            + (f" on lane {replay['lane']}" if replay.get("lane") else "")
            + f" at {replay['speed']:g}x their pace ({trace.skipped} rows of the window skipped: failed, or "
              f"without an arrival time or token counts); {trace.stored_count} prompts sent again as stored "
              f"(keys that store prompts, secrets redacted), the others synthetic text of their recorded "
              f"length, the turns of each of the {trace.conversation_count} conversations sharing one text's "
              "beginning as they shared their first messages; each answer its recorded output tokens")
    return trace


def level_slo(params: dict[str, Any]) -> Slo | None:
    ttft, tpot = params.get("slo_ttft_ms"), params.get("slo_tpot_ms")
    if ttft is None and tpot is None:
        return None
    return Slo(ttft_s=None if ttft is None else ttft / 1000, tpot_s=None if tpot is None else tpot / 1000)


def level_slice_s(params: dict[str, Any]) -> float | None:
    return params.get("slice_s") or (REPLAY_SLICE_S if params.get("replay") else None)


def _run_key(ctx: JobContext, lane: Lane, params: dict[str, Any], actor: Any) -> tuple[ApiKey | None, str | None]:
    """A key for this run only, limited to the lane, gone when the run ends; its secret
    lives in this process's memory and is never logged. None when no level goes through
    the gateway."""
    if "gateway" not in params["targets"]:
        return None, None
    limit = float(ctx.job.params.get("time_limit_s") or settings.JOBS_DEFAULT_TIME_LIMIT_S)
    created = api_key_create(actor=actor, name=run_key_name(ctx.job.pk),
                             allowed_lanes=[lane.name], default_route=lane.name,
                             expires_at=timezone.now() + timedelta(seconds=limit + KEY_GRACE_S))
    ctx.log(f"gateway key {created.key.prefix}… created for this run (expires with it)")
    return created.key, created.secret


def _check_paths_logged(ctx: JobContext, targets: dict[str, Target], timeout_s: float, run_tag: str) -> None:
    for name, record in ctx.wait(_check_paths(targets, timeout_s, run_tag)).items():
        if record.ok:
            ctx.log(f"path check ({name}, one token, not measured): first token in {record.ttft * 1000:.0f} ms")
        else:  # the levels still run: their failures are counted and shown
            ctx.log(f"path check ({name}, one token, not measured) failed: {record.error}", stream="stderr")


def _record_level(ctx: JobContext, run: BenchmarkRun, level: Level, outcome: LevelOutcome,
                  roce_before: dict[str, dict[str, int]], roce_after: dict[str, dict[str, int]]) -> dict[str, Any]:
    """The level's row saved, then broadcast and logged; its statistics."""
    stats = outcome.result.stats(slo=level_slo(run.params), slice_s=level_slice_s(run.params))
    row = BenchmarkLevel.objects.create(
        run=run, position=level.position, target=level.target, concurrency=level.concurrency,
        request_rate=level.request_rate, stats=stats,
        metrics=metrics_delta(outcome.metrics_before, outcome.metrics_after)
        if outcome.metrics_before and outcome.metrics_after else {},
        fabric=roce_delta(roce_before, roce_after), prime=outcome.prime,
    )
    broadcast(job_group(ctx.job.pk), "benchmark.level", level_payload(row))
    ctx.log(_summary(level, stats), stream="stdout")
    for error in stats["errors"]:
        ctx.log(f"  failed requests: {error}", stream="stderr")
    return stats


def _client_saturated(ctx: JobContext, step: Any, stats: dict[str, Any]) -> bool:
    """A saturated client is information, not a failure: the step is warned and says why."""
    client = stats["client"]
    if not client["saturated"]:
        return False
    step.state = StepState.WARNED
    step.detail = f"client saturated: {client['saturated_because']}"
    ctx.log(f"  the client was saturated ({client['saturated_because']}): these figures "
            f"measure the load generator, not only the lane", stream="stderr")
    return True


def _level_flagged(ctx: JobContext, step: Any, stats: dict[str, Any]) -> bool:
    """A level whose figures may not be what it says (a rate not reached, a concurrency not in
    flight, a client slow to send) is warned with the figures; its results stay."""
    flags = stats.get("flags") or []
    if not flags:
        return False
    step.state = StepState.WARNED
    step.detail = "; ".join(filter(None, [step.detail, *flags]))[:1000]
    for flag in flags:
        ctx.log(f"  flagged: {flag}", stream="stderr")
    return True

"""Our benchmark beside GuideLLM 0.8 on one sparksim lane: at each concurrency (1, 4, 8 by
default) a level of the product's load generator (benchmarks.loadgen, as the benchmark kind
runs it), then the same level through GuideLLM's CLI with JSON output, alternating for
--rounds rounds; the same prompt length as the lane counts it, the same output length with
ignore_eos on both sides, and prompts new to the lane on both sides (a fresh tag in front of
ours, a seed of its own for every GuideLLM run; the lane's prefix-cache hit share is printed for
each). Prints each figure (TTFT, TPOT and E2E p50, output tok/s, req/s),
the median over the rounds of ours and GuideLLM's, and the difference (goal: within 5%).

Needs GuideLLM installed by perf/guidellm_setup.sh (var/guidellm/venv, var/guidellm/tokenizer).

    .venv/bin/python -m perf.guidellm_side_by_side [--rounds 3] [--requests 64] [--concurrency 1 4 8]
        [--time-scale 1.0] [--show-requests 16]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import httpx

from benchmarks.loadgen import LevelPlan, Target, filler_text, level_client, run_level, sized_prompt
from sparksim.standalone import EngineHandle, start_engine

MODEL = "Qwen/Qwen3.8-27B-FP8"
SERVED = "qwen-bench"
ROOT = Path(__file__).resolve().parent.parent
GUIDELLM = ROOT / "var" / "guidellm" / "venv" / "bin" / "guidellm"
TOKENIZER = ROOT / "var" / "guidellm" / "tokenizer"
GOAL_SHARE = 0.05

# (key, label, unit): the figures compared, in the order printed.
FIGURES: tuple[tuple[str, str, str], ...] = (
    ("ttft_p50_ms", "TTFT p50", "ms"),
    ("tpot_p50_ms", "TPOT p50", "ms"),
    ("e2e_p50_ms", "E2E p50", "ms"),
    ("output_tok_s", "output tok/s", ""),
    ("req_s", "req/s", ""),
)

# Where GuideLLM's names and definitions differ from ours (vLLM bench serve's), from its source
# (guidellm/schemas/base/request_stats.py, benchmark/schemas/base.py).
DEFINITIONS = """\
How the figures map (ours = vllm bench serve's definitions; GuideLLM 0.8.1's fields in its JSON):
  TTFT   ours: send -> first content chunk     GuideLLM time_to_first_token_ms (request_start -> first token)
  TPOT   ours: (last - first chunk)/(n - 1)     GuideLLM inter_token_latency_ms, its "ITL" (same formula);
         GuideLLM's own "TPOT" (time_per_output_token_ms) is (last token - request_start)/n: it includes TTFT
  E2E    ours: send -> end of the stream        GuideLLM request_latency (request_start -> request_end), s
  tok/s  ours: output tokens / level wall time  GuideLLM output_token_count total / benchmark duration (its
         output_tokens_per_second is a per-second rate distribution, not a total; not used)
  req/s  ours: completed / level wall time      GuideLLM request_totals.successful / benchmark duration
  p50    ours: per request, linear interpolation; GuideLLM's ITL/TPOT distributions are weighted by
         output token (the same median here: every request has the same output length)
  idle   a stream's wall time not inside a request, per request: (duration x C - completed x mean E2E) /
         completed; at a fixed concurrency the throughputs differ by about the idle times' share of E2E
  Its prompt length is set in its tokenizer's tokens (the local MiniLM one); it is calibrated once so the
  lane's count (usage.prompt_tokens) matches ours, and both sides' means are printed."""


def our_level(engine: EngineHandle, concurrency: int, requests: int, output_tokens: int, ratio: float,
              prompt_tokens: int, tag: str) -> dict[str, Any]:
    async def prompt_for(index: int) -> str:
        # A fresh tag in front of every prompt, as the benchmark kind does: no shared cached block.
        return filler_text(prompt_tokens, f"{tag}-{index}", ratio)

    async def go() -> dict[str, Any]:
        plan = LevelPlan(concurrency=concurrency, request_rate=None, requests=requests, duration_s=None,
                         output_tokens=output_tokens, timeout_s=600.0)
        async with level_client(concurrency, httpx.Timeout(600.0, connect=10.0)) as client:
            result = await run_level(client, Target("direct", engine.url, SERVED), plan, prompt_for)
        return {**result.stats(), "ttfts_ms": [record.ttft * 1000.0 for record in result.records if record.ok]}

    stats = asyncio.run(go())
    return {
        "ttfts_ms": stats["ttfts_ms"],
        "ttft_p50_ms": stats["median_ttft_ms"], "tpot_p50_ms": stats["median_tpot_ms"],
        "e2e_p50_ms": stats["median_e2el_ms"], "output_tok_s": stats["output_throughput"],
        "req_s": stats["request_throughput"], "completed": stats["completed"], "failed": stats["failed"],
        "prompt_tokens": stats["total_input_tokens"] / max(stats["completed"], 1),
        "idle_ms": idle_ms(concurrency, stats["duration"], stats["completed"], stats["mean_e2el_ms"]),
    }


def idle_ms(concurrency: int, duration_s: float, completed: int, mean_e2e_ms: float) -> float:
    """A stream's time between one request's end and its next send, per request: what a
    closed-loop client adds to the level's wall time (and takes from its throughput)."""
    return (duration_s * 1000.0 * concurrency - completed * mean_e2e_ms) / max(completed, 1)


def calibrate_prompt(engine: EngineHandle, prompt_tokens: int) -> float:
    """Characters per lane token of our filler text (the lane's /tokenize, chat template included)."""

    async def go() -> str:
        async with httpx.AsyncClient(timeout=60.0) as client:
            return await sized_prompt(client, Target("direct", engine.url, SERVED), prompt_tokens, "calibrate")

    return len(asyncio.run(go())) / prompt_tokens


def guidellm_level(guidellm: Path, tokenizer: Path, engine: EngineHandle, concurrency: int, requests: int,
                   prompt_tokens: int, output_tokens: int, out: Path, seed: int) -> dict[str, Any]:
    # GuideLLM's synthetic prompts follow its seed (42 unless told): every run with the same seed
    # sends the same prompts, which the lane then serves from its prefix cache (measured: 53% of
    # a second C=1 round's prompt tokens, 99% of a C=4 level after the C=1 one). Each run gets a
    # seed of its own, so its prompts are as new to the lane as ours.
    command = [
        str(guidellm), "run",
        "--backend", f"kind=openai_http,target={engine.url},model={SERVED}",
        "--profile", f"kind=concurrent,streams={concurrency}",
        "--constraint", f"kind=max_requests,count={requests}",
        "--data", f"kind=synthetic_text,prompt_tokens={prompt_tokens},output_tokens={output_tokens}",
        "--tokenizer", f"kind=huggingface_auto,model={tokenizer}",
        "--output", f"kind=json,path={out}",
        "--seed", f"kind=static,value={seed}",
        "--disable-console-interactive",
    ]
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    done = subprocess.run(command, cwd=out.parent, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"guidellm exited {done.returncode}: {done.stderr[-2000:] or done.stdout[-2000:]}")
    benchmark = json.loads(out.read_text())["benchmarks"][0]
    metrics = benchmark["metrics"]
    duration = float(benchmark["duration"])
    completed = int(metrics["request_totals"]["successful"])

    def median(name: str) -> float:
        return float(metrics[name]["successful"]["median"])

    requests_done = benchmark.get("requests", {}).get("successful", [])
    in_send_order = sorted(requests_done, key=lambda request: request.get("request_start_time") or 0.0)
    return {
        "ttfts_ms": [float(request["time_to_first_token_ms"]) for request in in_send_order
                     if request.get("time_to_first_token_ms") is not None],
        "ttft_p50_ms": median("time_to_first_token_ms"), "tpot_p50_ms": median("inter_token_latency_ms"),
        "e2e_p50_ms": median("request_latency") * 1000.0,
        "output_tok_s": float(metrics["output_token_count"]["successful"]["total_sum"]) / duration,
        "req_s": completed / duration, "completed": completed,
        "failed": int(metrics["request_totals"]["errored"]) + int(metrics["request_totals"]["incomplete"]),
        "prompt_tokens": float(metrics["prompt_token_count"]["successful"]["mean"]),
        "their_tpot_p50_ms": median("time_per_output_token_ms"),
        "idle_ms": idle_ms(concurrency, duration, completed,
                           float(metrics["request_latency"]["successful"]["mean"]) * 1000.0),
    }


def prefix_cache_counts(engine: EngineHandle) -> tuple[float, float]:
    """The lane's prefix cache counters (hit tokens, queried tokens), from its /metrics."""
    text = httpx.get(f"{engine.url}/metrics", timeout=10.0).text
    counts = {"hits": 0.0, "queries": 0.0}
    for line in text.splitlines():
        for name in counts:
            if line.startswith(f"vllm:prefix_cache_{name}_total"):
                counts[name] += float(line.rsplit(" ", 1)[1])
    return counts["hits"], counts["queries"]


def with_cache_share(engine: EngineHandle, run: Any) -> dict[str, Any]:
    """One level's figures and the share of its prompt tokens the lane found in its prefix cache:
    a client whose prompts share leading blocks with earlier ones gets shorter prefills."""
    hits, queries = prefix_cache_counts(engine)
    row: dict[str, Any] = run()
    hits_after, queries_after = prefix_cache_counts(engine)
    row["cache_share"] = (hits_after - hits) / max(queries_after - queries, 1.0)
    return row


def mid(rows: list[dict[str, Any]], key: str) -> float:
    return statistics.median(row[key] for row in rows)


def report(concurrency: int, ours: list[dict[str, Any]], theirs: list[dict[str, Any]]) -> tuple[list[str], int, int]:
    lines = [f"C={concurrency}: {len(ours)} rounds, {sum(r['completed'] for r in ours)}/"
             f"{sum(r['completed'] for r in theirs)} requests completed (ours/GuideLLM), failed "
             f"{sum(r['failed'] for r in ours)}/{sum(r['failed'] for r in theirs)}; prompt tokens at the lane "
             f"{mid(ours, 'prompt_tokens'):.0f}/{mid(theirs, 'prompt_tokens'):.0f}; GuideLLM's own \"TPOT\" p50 "
             f"{mid(theirs, 'their_tpot_p50_ms'):.3f} ms; a stream's idle time between requests "
             f"{mid(ours, 'idle_ms'):.2f}/{mid(theirs, 'idle_ms'):.2f} ms; prompt tokens found in the lane's prefix "
             f"cache {mid(ours, 'cache_share'):.1%}/{mid(theirs, 'cache_share'):.1%}"]
    met = 0
    for key, label, unit in FIGURES:
        mine, other = mid(ours, key), mid(theirs, key)
        diff = (mine - other) / other if other else float("inf")
        ok = abs(diff) <= GOAL_SHARE
        met += ok
        spread = " ".join(f"{row[key]:.3f}/{their[key]:.3f}" for row, their in zip(ours, theirs, strict=True))
        lines.append(f"  {label:13} {mine:10.3f} {other:10.3f} {unit:3} {diff:+7.1%}  {'ok' if ok else 'MISS':4}"
                     f"  rounds ours/theirs: {spread}")
    return lines, met, len(FIGURES)


def request_lines(concurrency: int, ours: list[dict[str, Any]], theirs: list[dict[str, Any]], count: int) -> list[str]:
    """Each round's first TTFTs in send order, both clients: whether their streams keep in
    step (waves of one prefill alone and C - 1 behind it) or drift apart."""
    lines = []
    for index, (mine, other) in enumerate(zip(ours, theirs, strict=True)):
        for name, row in (("ours", mine), ("GuideLLM", other)):
            shown = " ".join(f"{value:.0f}" for value in row["ttfts_ms"][:count])
            lines.append(f"  C={concurrency} round {index + 1} {name:8} TTFT ms in send order: {shown}")
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--requests", type=int, default=64, help="requests per level")
    parser.add_argument("--concurrency", type=int, nargs="+", default=[1, 4, 8])
    parser.add_argument("--prompt-tokens", type=int, default=1000)
    parser.add_argument("--output-tokens", type=int, default=128)
    parser.add_argument("--time-scale", type=float, default=1.0)
    parser.add_argument("--guidellm", type=Path, default=GUIDELLM)
    parser.add_argument("--tokenizer", type=Path, default=TOKENIZER)
    parser.add_argument("--show-requests", type=int, default=0, metavar="N",
                        help="print each round's first N TTFTs in send order, ours and GuideLLM's")
    args = parser.parse_args()
    if not args.guidellm.exists() or not (args.tokenizer / "tokenizer.json").exists():
        parser.error(f"--guidellm {args.guidellm} or --tokenizer {args.tokenizer} is missing: "
                     f"run perf/guidellm_setup.sh")
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        engine = start_engine(MODEL, scratch / "engine.log", "--served-model-name", SERVED,
                              time_scale=args.time_scale)
        try:
            ratio = calibrate_prompt(engine, args.prompt_tokens)
            # GuideLLM sizes prompts in its tokenizer's tokens: one short run finds how many give
            # the lane's count of ours.
            probe = guidellm_level(args.guidellm, args.tokenizer, engine, 1, 4, args.prompt_tokens,
                                   args.output_tokens, scratch / "calibrate.json", seed=1)
            their_prompt = max(1, round(args.prompt_tokens * args.prompt_tokens / probe["prompt_tokens"]))
            ours: dict[int, list[dict[str, Any]]] = {c: [] for c in args.concurrency}
            theirs: dict[int, list[dict[str, Any]]] = {c: [] for c in args.concurrency}
            for round_index in range(args.rounds):
                for concurrency in args.concurrency:
                    ours[concurrency].append(with_cache_share(engine, lambda c=concurrency, r=round_index: our_level(
                        engine, c, args.requests, args.output_tokens, ratio, args.prompt_tokens, f"r{r}-c{c}")))
                    theirs[concurrency].append(with_cache_share(engine, lambda c=concurrency, r=round_index: guidellm_level(
                        args.guidellm, args.tokenizer, engine, c, args.requests, their_prompt,
                        args.output_tokens, scratch / f"guidellm-r{r}-c{c}.json", seed=1000 * (r + 1) + c)))
        finally:
            engine.stop()
    load_after = os.getloadavg()
    print(f"one sparksim lane ({MODEL}, time scale {args.time_scale}), {args.rounds} alternating rounds of "
          f"{args.requests} requests a level, {args.prompt_tokens} prompt tokens (GuideLLM asked for "
          f"{their_prompt} of its tokenizer's), {args.output_tokens} output tokens, ignore_eos")
    print(f"load average {load_before[0]:.2f} before, {load_after[0]:.2f} after, {os.cpu_count()} CPUs")
    print(f"  {'figure':13} {'ours':>10} {'GuideLLM':>10} {'':3} {'diff':>7}  goal within {GOAL_SHARE:.0%}")
    met = total = 0
    for concurrency in args.concurrency:
        lines, ok, count = report(concurrency, ours[concurrency], theirs[concurrency])
        met, total = met + ok, total + count
        print("\n".join(lines))
        if args.show_requests:
            print("\n".join(request_lines(concurrency, ours[concurrency], theirs[concurrency], args.show_requests)))
    print(f"{met} of {total} figures within {GOAL_SHARE:.0%}")
    print(DEFINITIONS)


if __name__ == "__main__":
    main()

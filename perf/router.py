"""The semantic router's cost and accuracy, in one run, with the starter prototypes.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/router_bench REDIS_URL=redis://127.0.0.1:6379/3 \\
        .venv/bin/python perf/router.py [--fp32 DIR] [--quick] [--no-gateway | --gateway-only] [--json PATH]

1. the bare encoder forward pass, short (~15 tokens) and long (~250 tokens) prompts, for the
   configured model (int8 MiniLM by default) and, with --fp32 DIR, an fp32 export of the same
   model (perf/export_fp32_minilm.py) — the representation fastest on this CPU;
2. the full routing decision of the starter (the learned head; embed through the
   micro-batcher + the head + the lane pick), cold (unique prompts) and cached (repeats),
   short and long, sequential and 32 concurrent (short, long and mixed), micro-batching by
   length against one plain batch of up to 32 and against one-at-a-time;
   a 100K-character prompt tokenized whole against cut before tokenizing;
3. the starter version's accuracy on the evaluation set, learned and similarity rules side
   by side, the head's cross-validated accuracy on the prototypes, beside the best single
   cut on characters and on tokens and the keyword baseline;
   feedback ingestion (the service behind POST /v1/feedback, per request and per conversation);
4. the gateway's added latency for model="auto" against an explicit lane (uvicorn + a fast
   local upstream, as perf/gateway_overhead.py).
Percentiles are in milliseconds. No timing here is asserted by a test."""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

import django  # noqa: E402

django.setup()

import numpy as np  # noqa: E402
from django.conf import settings  # noqa: E402
from django.contrib.auth.models import AnonymousUser  # noqa: E402

from core.stats import percentile_nearest_rank  # noqa: E402
from gateway.models import ApiKey, RequestLog, RequestOutcome  # noqa: E402
from gateway.services import api_key_create, request_outcome_record  # noqa: E402
from lanes.models import Lane, LaneNode, Node  # noqa: E402
from perf.gateway_drive import BODY, Result, drive, free_port, serve_upstream, wait_port  # noqa: E402
from routing.batcher import EmbeddingBatcher  # noqa: E402
from routing.decision import (  # noqa: E402
    PrototypeSet,
    RouterConfig,
    decide,
    evaluate,
    keyword_baseline,
    length_baseline,
)
from routing.encoder import Encoder  # noqa: E402
from routing.evaluation import DEEP_KEYWORDS  # noqa: E402
from routing.learned import LearnedHead  # noqa: E402
from routing.selectors import published_version  # noqa: E402
from routing.services import (  # noqa: E402
    STARTER_AGGREGATION,
    STARTER_DEFAULT_LANE,
    STARTER_DIR,
    STARTER_LABEL_LANES,
    STARTER_PROBABILITY_FLOOR,
    STARTER_THRESHOLD,
    prototypes_import,
    router_version_create_draft,
    router_version_publish,
    router_version_train,
)
from routing.training import train_head  # noqa: E402

SUBJECTS = ["PostgreSQL", "Redis", "the RoCE switch", "vLLM", "the Spark nodes", "Celery", "nginx", "Kafka",
            "the KV cache", "NCCL", "the router", "Docker", "Ray", "the UPS", "the gateway", "Prometheus"]


def short_prompt(i: int) -> str:
    """~15 tokens, unique per i."""
    return f"What is the default timeout of {SUBJECTS[i % len(SUBJECTS)]} in setup number {i}?"


def long_prompt(i: int) -> str:
    """~250 tokens, unique per i: pasted text and a question."""
    lines = " ".join(f"{SUBJECTS[(i + k) % len(SUBJECTS)]} reported status ok at step {i * 31 + k} with latency {k * 7} ms;"
                     for k in range(14))
    return f"Here is the log of run {i}: {lines} Which component reported the highest latency?"


def summary(values: list[float]) -> dict[str, float]:
    """p50 and p99 of the router's own timings (seconds), in ms: nearest rank, an observed time."""
    return {f"p{round(q * 100)}_ms": round((percentile_nearest_rank(values, q) or 0.0) * 1000, 3) for q in (0.5, 0.99)}


def request_summary(values: list[float]) -> dict[str, float]:
    """p50 and p99 of requests timed by their client, in ms: the benchmarks' rule (linear)."""
    return {f"p{round(q * 100)}_ms": round(Result.ms(values, q), 3) for q in (0.5, 0.99)}


def starter_set(encoder: Encoder) -> tuple[PrototypeSet, RouterConfig]:
    """The starter version as published: its prototypes and their trained head."""
    rows = list(csv.DictReader((STARTER_DIR / "prototypes.csv").open()))
    texts, labels = tuple(r["text"] for r in rows), tuple(r["label"] for r in rows)
    vectors = encoder.embed(list(texts))
    config = RouterConfig(STARTER_THRESHOLD, STARTER_AGGREGATION, 3, STARTER_LABEL_LANES, STARTER_DEFAULT_LANE,
                          probability_floor=STARTER_PROBABILITY_FLOOR)
    head = train_head(vectors, texts, labels, encoder=encoder.id, lane_for=config.lane_for)
    return PrototypeSet(texts, labels, vectors, head=head), config


def huge_prompt(size: int = 100_000) -> str:
    filler = "node spark3 reported ok at step 41; latency=12ms, queue {depth: 3} SELECT id FROM runs; "
    return "Summarise the failures in this log. " + (filler * (size // len(filler) + 1))[:size] + " Which node failed?"


def bench_truncation(encoder: Encoder, rounds: int) -> dict[str, Any]:
    """A 100K-character prompt: tokenized whole then cut (before), against cut in characters
    first (now); and its full embedding."""
    text = huge_prompt()
    whole, cut, embed = [], [], []
    for _ in range(max(5, rounds // 20)):
        started = time.perf_counter()
        encoder._head_and_tail(encoder.tokenizer.encode(text).ids)
        whole.append(time.perf_counter() - started)
        started = time.perf_counter()
        encoder.tokenize([text])
        cut.append(time.perf_counter() - started)
        started = time.perf_counter()
        encoder.embed([text])
        embed.append(time.perf_counter() - started)
    return {"chars": len(text), "tokenize_whole_then_cut": summary(whole), "cut_then_tokenize": summary(cut),
            "embed": summary(embed),
            "same_tokens": list(encoder.tokenize([text])[0][0]) == encoder._head_and_tail(encoder.tokenizer.encode(text).ids)}


def bench_forward(encoder: Encoder, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for kind, make in (("short", short_prompt), ("long", long_prompt)):
        n = rounds if kind == "short" else max(20, rounds // 4)
        encoder.embed([make(10_000)])  # warm-up
        times = []
        for i in range(n):
            text = make(i)
            started = time.perf_counter()
            encoder.embed([text])
            times.append(time.perf_counter() - started)
        out[kind] = {"tokens": encoder.token_count(make(0)), **summary(times)}
    return out


async def timed(n: int, one: Callable[[int], Awaitable[None]]) -> list[float]:
    times = []
    for i in range(n):
        started = time.perf_counter()
        await one(i)
        times.append(time.perf_counter() - started)
    return times


async def bench_decision(encoder: Encoder, prototypes: PrototypeSet, config: RouterConfig, rounds: int) -> dict[str, Any]:
    out: dict[str, Any] = {}

    def usable(_lane: str) -> bool:
        return True

    for kind, make in (("short", short_prompt), ("long", long_prompt)):
        n = rounds if kind == "short" else max(20, rounds // 4)
        batcher = EmbeddingBatcher(encoder, max_batch=settings.ROUTER_MAX_BATCH)
        await batcher.embed(make(10_000))

        async def cold(i: int, make: Callable[[int], str] = make, batcher: EmbeddingBatcher = batcher) -> None:
            decide(await batcher.embed(make(i)), prototypes, config, usable=usable)

        async def cached(_i: int, make: Callable[[int], str] = make, batcher: EmbeddingBatcher = batcher) -> None:
            decide(await batcher.embed(make(0)), prototypes, config, usable=usable)

        out[kind] = {"cold": summary(await timed(n, cold)), "cached": summary(await timed(n * 4, cached))}
        batcher.close()
    # Only the decision's own work (the matrix product and the label pick) on a cached vector.
    vector = encoder.embed([short_prompt(1)])[0]
    pick = []
    for _ in range(2000):
        started = time.perf_counter()
        decide(vector, prototypes, config, usable=usable)
        pick.append(time.perf_counter() - started)
    out["pick_only"] = summary(pick)
    return out


async def bench_concurrent(encoder: Encoder, prototypes: PrototypeSet, config: RouterConfig, rounds: int) -> dict[str, Any]:
    """32 clients at once, each asking for unique prompts: micro-batched by length, in one
    plain batch of up to 32 (no length grouping: the earlier batcher), and one at a time."""
    out: dict[str, Any] = {}

    def mixed_prompt(i: int) -> str:
        return long_prompt(i) if i % 2 else short_prompt(i)

    modes: tuple[tuple[str, dict[str, Any]], ...] = (
        ("by_length", {"max_batch": settings.ROUTER_MAX_BATCH}),
        ("plain_batch", {"max_batch": settings.ROUTER_MAX_BATCH, "batch_tokens": 10**9, "spread": float("inf")}),
        ("one_at_a_time", {"max_batch": 1}),
    )
    for kind, make in (("short", short_prompt), ("long", long_prompt), ("mixed", mixed_prompt)):
        total = 32 * (rounds // 20 if kind == "short" else max(2, rounds // 80))
        for mode, options in modes:
            batcher = EmbeddingBatcher(encoder, cache_size=0, **options)
            await batcher.embed(make(99_999))
            latencies: list[float] = []
            counter = iter(range(total))

            async def client(batcher: EmbeddingBatcher = batcher, latencies: list[float] = latencies,
                             counter: Any = counter, make: Callable[[int], str] = make) -> None:
                for i in counter:
                    started = time.perf_counter()
                    decide(await batcher.embed(make(1_000 + i)), prototypes, config, usable=lambda _lane: True)
                    latencies.append(time.perf_counter() - started)

            begin = time.perf_counter()
            await asyncio.gather(*(client() for _ in range(32)))
            elapsed = time.perf_counter() - begin
            out[f"{kind}_{mode}"] = {"decisions_per_s": round(total / elapsed, 1), **summary(latencies),
                                     "forward_passes": batcher.batches}
            batcher.close()
        for mode in ("by_length", "plain_batch"):
            out[f"{kind}_{mode}_speedup"] = round(out[f"{kind}_{mode}"]["decisions_per_s"]
                                                  / out[f"{kind}_one_at_a_time"]["decisions_per_s"], 2)
    return out


def bench_accuracy(encoder: Encoder, prototypes: PrototypeSet, config: RouterConfig) -> dict[str, Any]:
    rows = list(csv.DictReader((STARTER_DIR / "eval_prompts.csv").open()))
    texts, labels = [r["text"] for r in rows], [r["label"] for r in rows]
    queries = encoder.embed(texts)
    result = evaluate(queries, texts, labels, prototypes, config)
    similarity = evaluate(queries, texts, labels, replace(prototypes, head=None), replace(config, aggregation="mean_top_k"))
    expected = [config.lane_for(label) for label in labels]
    chars = length_baseline([len(t) for t in texts], expected, result.lanes, unit="characters")
    tokens = length_baseline([encoder.token_count(t) for t in texts], expected, result.lanes, unit="tokens")
    keywords = keyword_baseline(texts, expected, keywords=DEEP_KEYWORDS, keyword_lane="deepseek", other_lane="qwen")
    head: LearnedHead | None = prototypes.head
    missed = {name: Counter(m[1] for m in run.mistakes) for name, run in (("learned", result), ("similarity", similarity))}
    return {"prompts": len(texts), "learned_accuracy (held out)": round(result.accuracy, 3), "shares": result.shares,
            "missed_of_label": {label: {**{k: v[label] for k, v in missed.items()}, "of": n} for label, n in Counter(labels).items()},
            "confusion": {"lanes": result.lanes, "rows": result.confusion},
            "similarity_accuracy (threshold tuned on this set: in-sample)": round(similarity.accuracy, 3),
            "learned_cv_on_prototypes": head.cv_accuracy if head else None,
            "learned_on_own_prototypes (in-sample)": head.train_accuracy if head else None,
            "length_cut_characters (in-sample)": {"accuracy": round(chars.accuracy, 3), "rule": chars.detail},
            "length_cut_tokens (in-sample)": {"accuracy": round(tokens.accuracy, 3), "rule": tokens.detail},
            "keywords": {"accuracy": round(keywords.accuracy, 3), "rule": keywords.detail}}


def bench_feedback(n: int) -> dict[str, Any]:
    """Feedback ingestion: the service behind POST /v1/feedback (ownership check + upsert),
    sequential, per request and per conversation of 5 turns; the HTTP hop is not included."""
    subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
    ApiKey.objects.filter(name="router-bench-feedback").delete()
    key = api_key_create(actor=AnonymousUser(), name="router-bench-feedback").key
    RequestLog.objects.bulk_create([
        RequestLog(request_id=f"req-bench-{i}", key=key, endpoint="chat.completions", lane="qwen", status=200,
                   latency_ms=1.0, conversation=f"{i // 5:032x}") for i in range(n)])
    out: dict[str, Any] = {}
    for scope, ids in (("request", range(n)), ("conversation", range(0, n, 5))):
        times = []
        begin = time.perf_counter()
        for i in ids:
            started = time.perf_counter()
            request_outcome_record(key_id=key.pk, request_id=f"req-bench-{i}", score=1.0, task="bench",
                                   conversation=scope == "conversation")
            times.append(time.perf_counter() - started)
        out[scope] = {"feedbacks_per_s": round(len(times) / (time.perf_counter() - begin), 1), **summary(times)}
    RequestOutcome.objects.filter(key=key).delete()
    RequestLog.objects.filter(key=key).delete()
    key.delete()
    return out


def bench_gateway(quick: bool) -> dict[str, Any]:
    """model="auto" against model="bench-fast" through one uvicorn worker, a fast upstream."""
    upstream_port, gateway_port = free_port(), free_port()
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "PORTAL_LOG_LEVEL": "WARNING"}
    children = [subprocess.Popen([sys.executable, str(ROOT / "perf" / "gateway_overhead.py"), "--serve-upstream",
                                  str(upstream_port)], env=env)]
    try:
        wait_port(upstream_port)
        subprocess.run([sys.executable, "manage.py", "migrate", "-v0"], cwd=ROOT, check=True)
        ApiKey.objects.filter(name="router-bench").delete()
        for name in ("qwen", "deepseek"):
            Lane.objects.filter(name=name).delete()
            Node.objects.filter(name=f"bench-{name}").delete()
            node = Node.objects.create(name=f"bench-{name}", address="127.0.0.1", transport="local")
            lane = Lane.objects.create(name=name, model_id=f"perf/{name}", image="bench@sha256:" + "0" * 64,
                                       api_port=upstream_port, max_model_len=32768, observed_state="serving")
            LaneNode.objects.create(lane=lane, node=node, rank=0)
        prototypes_import(actor=None, content=(STARTER_DIR / "prototypes.csv").read_text(), fmt="csv")
        if published_version() is None or published_version().label_lanes != STARTER_LABEL_LANES:  # type: ignore[union-attr]
            draft = router_version_create_draft(actor=None)
            router_version_train(version_id=draft.pk)
            draft.refresh_from_db()
            router_version_publish(actor=None, version=draft)
        secret = api_key_create(actor=AnonymousUser(), name="router-bench").secret
        children.append(subprocess.Popen(
            [sys.executable, "-m", "uvicorn", "portal.asgi:application", "--host", "127.0.0.1", "--port",
             str(gateway_port), "--workers", "1", "--loop", "uvloop", "--http", "httptools", "--no-access-log",
             "--log-level", "warning"], cwd=ROOT, env=env))
        wait_port(gateway_port)
        return asyncio.run(_gateway_runs(gateway_port, secret, quick))
    finally:
        for child in children:
            child.send_signal(signal.SIGINT)
        for child in children:
            try:
                child.wait(10)
            except subprocess.TimeoutExpired:
                child.kill()


async def _gateway_runs(port: int, secret: str, quick: bool) -> dict[str, Any]:
    """Explicit and auto in alternating rounds, so a busy machine slows both alike."""
    url = f"http://127.0.0.1:{port}/v1/chat/completions"
    auth = {"authorization": f"Bearer {secret}", "x-stainless-retry-count": "0"}
    rounds, per_round = (4, 75) if quick else (10, 150)
    latencies: dict[str, list[float]] = {"qwen": [], "auto": []}
    errors = 0
    for round_number in range(rounds + 1):
        for model in ("qwen", "auto"):
            body = {**BODY, "model": model,
                    "messages": [{"role": "user", "content": "What port does PostgreSQL use by default?"}]}
            result = await drive(url, auth, stream=False, concurrency=1, requests=per_round, template=body)
            if round_number:  # the first round warms caches and the encoder
                latencies[model].extend(result.latencies)
                errors += result.errors
    out: dict[str, Any] = {model: request_summary(values) for model, values in latencies.items()}
    out["auto_added_p50_ms"] = round(out["auto"]["p50_ms"] - out["qwen"]["p50_ms"], 3)
    out["errors"] = errors
    out["note"] = "same prompt every time: the router's cached path; cold decisions cost the forward pass (above)"
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fp32", help="directory of an fp32 export of the same model (model.onnx + tokenizer.json)")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--no-gateway", action="store_true")
    parser.add_argument("--gateway-only", action="store_true")
    parser.add_argument("--json")
    parser.add_argument("--serve-upstream", type=int)
    args = parser.parse_args()
    if args.serve_upstream:
        serve_upstream(args.serve_upstream)
        return
    rounds = 60 if args.quick else 200
    # The machine is shared: its load average says how far the figures are from a quiet one's.
    report: dict[str, Any] = {"cpu_threads": os.cpu_count(), "load_average_start": [round(x, 2) for x in os.getloadavg()]}
    if args.gateway_only:
        print(json.dumps(bench_gateway(args.quick), indent=1))
        return
    encoder = Encoder(Path(settings.ROUTER_MODEL_DIR), threads=settings.ROUTER_THREADS)
    report["forward"] = {encoder.id: bench_forward(encoder, rounds)}
    if args.fp32:
        fp32 = Encoder(Path(args.fp32), threads=settings.ROUTER_THREADS)
        report["forward"][fp32.id + " (fp32)"] = bench_forward(fp32, rounds)
        probe = [short_prompt(3), long_prompt(3)]
        report["fp32_vs_int8_cosine"] = [round(float(x), 5) for x in np.sum(fp32.embed(probe) * encoder.embed(probe), axis=1)]
    print(json.dumps(report, indent=1), flush=True)
    prototypes, config = starter_set(encoder)
    report["decision"] = asyncio.run(bench_decision(encoder, prototypes, config, rounds))
    fwd = report["forward"][encoder.id]
    report["decision_over_forward"] = {k: round(report["decision"][k]["cold"]["p50_ms"] / fwd[k]["p50_ms"], 3)
                                       for k in ("short", "long")}
    print(json.dumps({k: report[k] for k in ("decision", "decision_over_forward")}, indent=1), flush=True)
    report["truncation"] = bench_truncation(encoder, rounds)
    print(json.dumps(report["truncation"], indent=1), flush=True)
    report["concurrent_32"] = asyncio.run(bench_concurrent(encoder, prototypes, config, rounds))
    print(json.dumps(report["concurrent_32"], indent=1), flush=True)
    report["accuracy"] = bench_accuracy(encoder, prototypes, config)
    print(json.dumps(report["accuracy"], indent=1), flush=True)
    report["feedback"] = bench_feedback(200 if args.quick else 1000)
    print(json.dumps(report["feedback"], indent=1), flush=True)
    if not args.no_gateway:
        report["gateway"] = bench_gateway(args.quick)
        print(json.dumps(report["gateway"], indent=1), flush=True)
    report["load_average_end"] = [round(x, 2) for x in os.getloadavg()]
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2, default=str))
    print("median of medians:", statistics.median([v["p50_ms"] for v in report["forward"][encoder.id].values()]))


if __name__ == "__main__":
    main()

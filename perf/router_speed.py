"""Where the router's decision for a unique short prompt spends its time, and which
onnxruntime session options make the encoder fastest on this machine.

    .venv/bin/python -m perf.router_speed [--rounds 6] [--per-round 40] [--json PATH]

1. session variants (intra-op threads, spinning of the intra-op pool, graph optimisation),
   each embedding the same unique ~15-word prompts (and then fewer ~225-token ones), interleaved prompt by prompt (every
   variant embeds prompt i before any embeds prompt i+1), so a loaded machine slows all of
   them alike;
2. one call of the shipped encoder taken apart: tokenizing (one `encode` against
   `encode_batch` of one text), `session.run`, pooling and normalising;
3. the decision as perf/router.py times it (the micro-batcher: its thread hop, the encoder,
   the learned head and the lane pick) beside the encoder's own call, interleaved: their
   difference is what the decision adds to the encoder.
The load average is recorded with each part. Milliseconds; no timing here is asserted by a test."""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort

from perf.router import long_prompt, short_prompt, starter_set, summary
from routing.batcher import EmbeddingBatcher
from routing.decision import decide
from routing.encoder import Encoder, session_options

VARIANTS: dict[str, dict[str, Any]] = {
    # name: Encoder keyword arguments / session options
    "threads=0 (one per core), spinning": {"threads": 0, "spinning": True},
    "threads=2, no spinning": {"threads": 2, "spinning": False},
    "threads=1": {"threads": 1, "spinning": False},
    "threads=1, basic graph optimisation": {"threads": 1, "spinning": False, "level": "basic"},
}


def load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def variant_encoder(directory: Path, threads: int, spinning: bool, level: str = "all") -> Encoder:
    encoder = Encoder(directory, threads=threads, spinning=spinning)
    if level != "all":  # the same model under other session options (the tokenizer is shared)
        options = session_options(threads, spinning)
        options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_BASIC
        encoder.session = ort.InferenceSession(str(directory / "model.onnx"), options,
                                               providers=["CPUExecutionProvider"])
    return encoder


def bench_variants(directory: Path, rounds: int, per_round: int, make: Callable[[int], str]) -> dict[str, Any]:
    encoders = {name: variant_encoder(directory, **options) for name, options in VARIANTS.items()}
    times: dict[str, list[float]] = {name: [] for name in encoders}
    started = load()
    for encoder in encoders.values():
        encoder.embed([make(99_999)])  # warm-up
    names = list(encoders)
    for i in range(rounds * per_round):
        text = make(i)
        for name in names[i % len(names):] + names[:i % len(names)]:  # each goes first in turn
            encoder = encoders[name]
            begin = time.perf_counter()
            encoder.embed([text])
            times[name].append(time.perf_counter() - begin)
    return {"load_average_start": started, "load_average_end": load(), "calls_each": rounds * per_round,
            "tokens": encoders[names[0]].token_count(make(0)), **{name: summary(values) for name, values in times.items()}}


def timed_parts(encoder: Encoder, n: int) -> dict[str, Any]:
    """One call taken apart, on unique prompts: each part timed on its own."""
    parts: dict[str, list[float]] = {"encode (one text)": [], "encode_batch (one text)": [], "tokenize (ours)": [],
                                     "session.run": [], "pooling + normalising": [], "whole embed": []}

    def clock(name: str, work: Callable[..., Any], *args: Any) -> Any:
        begin = time.perf_counter()
        out = work(*args)
        parts[name].append(time.perf_counter() - begin)
        return out

    started = load()
    for i in range(n):
        text = short_prompt(50_000 + i)
        tokenizers: list[tuple[str, Callable[..., Any], Any]] = [
                      ("encode (one text)", encoder.tokenizer.encode, text),
                      ("encode_batch (one text)", encoder.tokenizer.encode_batch, [text])]
        for name, work, arg in tokenizers[::1 if i % 2 else -1]:  # each goes first in turn
            clock(name, work, arg)
        ids, mask = clock("tokenize (ours)", encoder.tokenize, [text])
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in encoder.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        hidden = clock("session.run", encoder.session.run, encoder.output_names, feeds)[0]
        clock("pooling + normalising", encoder.pool, hidden, mask)
        clock("whole embed", encoder.embed, [short_prompt(60_000 + i)])
    return {"load_average_start": started, "load_average_end": load(), "tokens": int(ids.shape[1]),
            **{name: summary(values) for name, values in parts.items()}}


async def decision_beside_encoder(encoder: Encoder, n: int) -> dict[str, Any]:
    prototypes, config = starter_set(encoder)
    batcher = EmbeddingBatcher(encoder, max_batch=32)
    await batcher.embed(short_prompt(99_998))
    decision, alone, added = [], [], []
    started = load()
    for i in range(n):
        begin = time.perf_counter()
        decide(await batcher.embed(short_prompt(70_000 + i)), prototypes, config, usable=lambda _lane: True)
        middle = time.perf_counter()
        encoder.embed([short_prompt(80_000 + i)])
        end = time.perf_counter()
        decision.append(middle - begin)
        alone.append(end - middle)
        added.append((middle - begin) - (end - middle))
    batcher.close()
    hop = await batcher_hop(encoder, n)
    return {"load_average_start": started, "load_average_end": load(), "decision": summary(decision),
            "encoder_alone": summary(alone), "decision_minus_encoder_p50_ms": round(float(np.median(added)) * 1000, 3),
            "batcher_hop_with_an_instant_encoder": summary(hop)}


class InstantEncoder:
    """The batcher's machinery alone: an "encoder" that answers at once."""

    def __init__(self, encoder: Encoder) -> None:
        self.spec, self.vector = encoder.spec, encoder.embed(["probe"])[0]

    def embed(self, texts: list[str]) -> Any:
        return np.repeat(self.vector[None, :], len(texts), axis=0)


async def batcher_hop(encoder: Encoder, n: int) -> list[float]:
    """What the micro-batcher costs a unique query by itself: the executor thread's hop there
    and back, and the futures (no forward pass)."""
    batcher = EmbeddingBatcher(InstantEncoder(encoder), max_batch=32)  # type: ignore[arg-type]
    times = []
    for i in range(n):
        begin = time.perf_counter()
        await batcher.embed(short_prompt(90_000 + i))
        times.append(time.perf_counter() - begin)
    batcher.close()
    return times


def main() -> None:
    from django.conf import settings

    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=6)
    parser.add_argument("--per-round", type=int, default=40)
    parser.add_argument("--json")
    args = parser.parse_args()
    directory = Path(settings.ROUTER_MODEL_DIR)
    report: dict[str, Any] = {"cpu_threads": os.cpu_count(), "router_threads": settings.ROUTER_THREADS}
    report["variants"] = bench_variants(directory, args.rounds, args.per_round, short_prompt)
    print(json.dumps(report["variants"], indent=1), flush=True)
    report["variants_long"] = bench_variants(directory, args.rounds, max(2, args.per_round // 8), long_prompt)
    print(json.dumps(report["variants_long"], indent=1), flush=True)
    shipped = Encoder(directory, threads=settings.ROUTER_THREADS)
    report["parts"] = timed_parts(shipped, args.rounds * args.per_round)
    print(json.dumps(report["parts"], indent=1), flush=True)
    report["decision"] = asyncio.run(decision_beside_encoder(shipped, args.rounds * args.per_round))
    print(json.dumps(report["decision"], indent=1), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()

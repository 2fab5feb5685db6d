"""200 concurrent streaming clients against one sparksim engine, time scaled down.

Measures how far the observed TTFT and decode speed stray from the timing model (what a
perfect engine would produce for the same arrivals), i.e. how much the simulator's own
overhead on this machine distorts it. Goal: within 5%.

    .venv/bin/python -m perf.sparksim_load [--streams 200] [--time-scale 0.5]
"""

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path
from statistics import fmean, quantiles

from sparksim.loadgen import StreamResult, compare_wave, run_wave
from sparksim.standalone import start_engine
from sparksim.timing import DEEPSEEK, PlannedRequest, simulate

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], fraction: float) -> float:
    return quantiles(values, n=100)[int(fraction * 100) - 1] if len(values) > 1 else values[0]


def quantile_deviation(observed: list[float], expected: list[float], fraction: float) -> float:
    wanted = percentile(expected, fraction)
    return abs(percentile(observed, fraction) - wanted) / wanted


async def wave(url: str, streams: int, words: int, max_tokens: int, scale: float,
               tag: str) -> tuple[float, list[StreamResult], float]:
    prompts = [" ".join(f"{tag}{index}w{word % 89}" for word in range(words))
               for index in range(streams)]
    started, results = await run_wave(url, MODEL, streams, prompts, max_tokens)
    return started, results, time.monotonic() - started


def report(label: str, scale: float, started: float, results: list[StreamResult],
           wall: float) -> list[str]:
    comparison = compare_wave(DEEPSEEK, scale, started, results)
    planned = [PlannedRequest((result.sent_at - started) / scale, result.prompt_tokens,
                              result.completion_tokens) for result in results]
    expected = simulate(DEEPSEEK, planned)
    observed_ttft = [result.ttft / scale for result in results]
    expected_ttft = [line.ttft_s(plan.arrival_s) for line, plan in zip(expected, planned,
                                                                       strict=True)]
    observed_decode = [result.decode_tok_s * scale for result in results]
    expected_decode = [line.decode_tok_s for line in expected]
    tokens = sum(result.tokens for result in results)
    return [
        f"{label}: {len(results)} streams, {tokens} tokens, wall {wall:.2f} s real "
        f"({wall / scale:.1f} s simulated), aggregate {tokens / (wall / scale):.0f} tok/s "
        "simulated",
        f"  TTFT mean    observed {comparison.observed_ttft_s:8.3f} s   model "
        f"{comparison.expected_ttft_s:8.3f} s   deviation {comparison.ttft_deviation:6.2%}",
        f"  TTFT p95     observed {percentile(observed_ttft, 0.95):8.3f} s   model "
        f"{percentile(expected_ttft, 0.95):8.3f} s   deviation "
        f"{quantile_deviation(observed_ttft, expected_ttft, 0.95):6.2%}",
        f"  decode mean  observed {comparison.observed_decode_tok_s:8.2f} t/s model "
        f"{comparison.expected_decode_tok_s:8.2f} t/s deviation {comparison.decode_deviation:6.2%}",
        f"  decode p5    observed {percentile(observed_decode, 0.05):8.2f} t/s model "
        f"{percentile(expected_decode, 0.05):8.2f} t/s deviation "
        f"{quantile_deviation(observed_decode, expected_decode, 0.05):6.2%}",
    ]


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--streams", type=int, default=200)
    parser.add_argument("--time-scale", type=float, default=0.5)
    parser.add_argument("--prompt-words", type=int, default=100)
    parser.add_argument("--max-tokens", type=int, default=128)
    args = parser.parse_args()
    scale = args.time_scale
    log_path = Path(tempfile.mkdtemp(prefix="sparksim-bench-")) / "engine.log"
    engine = start_engine(MODEL, log_path, "--kv-cache-memory-bytes", "11G", "--max-model-len",
                          "131072", "--max-num-seqs", str(max(256, args.streams)),
                          "--no-enable-prefix-caching", time_scale=scale)
    try:
        lines = [f"engine: {MODEL} (DeepSeek-like profile), time scale {scale}, "
                 f"{os.cpu_count()} CPUs"]
        started, results, wall = await wave(engine.url, 1, args.prompt_words, args.max_tokens,
                                            scale, "solo")
        lines += report("baseline", scale, started, results, wall)
        cpu_before = cpu_seconds(engine.process.pid)
        started, results, wall = await wave(engine.url, args.streams, args.prompt_words,
                                            args.max_tokens, scale, "load")
        engine_cpu = cpu_seconds(engine.process.pid) - cpu_before
        lines += report("load", scale, started, results, wall)
        lines.append(f"  engine CPU {engine_cpu:.2f} s over {wall:.2f} s wall "
                     f"({engine_cpu / wall:.0%} of one core); all {len(results)} streams "
                     f"completed: {all(r.tokens == args.max_tokens for r in results)}")
        mean_prompt = fmean(result.prompt_tokens for result in results)
        lines.append(f"  prompt {mean_prompt:.0f} tokens, {args.max_tokens} output tokens each "
                     "(ignore_eos)")
        print("\n".join(lines))
    finally:
        engine.stop()


if __name__ == "__main__":
    asyncio.run(main())

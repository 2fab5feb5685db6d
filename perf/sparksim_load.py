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
from pathlib import Path
from statistics import fmean

from benchmarks.loadgen import LevelResult
from core.stats import percentile_linear
from perf.sparksim_waves import deviation, engine_wave, wave_figures
from sparksim.standalone import start_engine
from sparksim.timing import DEEPSEEK

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quantile_line(label: str, unit: str, observed: list[float], expected: list[float], q: float) -> str:
    """The benchmarks' rule (linear), as their TTFT and decode figures are."""
    seen, wanted = percentile_linear(observed, q) or 0.0, percentile_linear(expected, q) or 0.0
    digits = 3 if unit == "s" else 2
    return (f"  {label:<12} observed {seen:8.{digits}f} {unit:<3} model {wanted:8.{digits}f} {unit:<3} "
            f"deviation {deviation(seen, wanted):6.2%}")


async def wave(url: str, streams: int, words: int, max_tokens: int, tag: str) -> LevelResult:
    prompts = [" ".join(f"{tag}{index}w{word % 89}" for word in range(words))
               for index in range(streams)]
    return await engine_wave(url, MODEL, prompts, max_tokens)


def report(label: str, scale: float, result: LevelResult) -> list[str]:
    figures = wave_figures(DEEPSEEK, scale, result)
    wall = result.ended_at - result.started_at
    tokens = sum(sum(record.chunk_tokens) for record in result.records)
    client = result.client
    return [
        f"{label}: {len(result.records)} streams, {tokens} tokens, wall {wall:.2f} s real "
        f"({wall / scale:.1f} s simulated), aggregate {tokens / (wall / scale):.0f} tok/s "
        "simulated",
        f"  TTFT mean    observed {fmean(figures.observed_ttft_s):8.3f} s   model "
        f"{fmean(figures.expected_ttft_s):8.3f} s   deviation {figures.ttft_deviation:6.2%}",
        quantile_line("TTFT p95", "s", figures.observed_ttft_s, figures.expected_ttft_s, 0.95),
        f"  decode mean  observed {fmean(figures.observed_decode_tok_s):8.2f} t/s model "
        f"{fmean(figures.expected_decode_tok_s):8.2f} t/s deviation {figures.decode_deviation:6.2%}",
        quantile_line("decode p5", "t/s", figures.observed_decode_tok_s, figures.expected_decode_tok_s, 0.05),
        f"  client {client.cpu_share:.0%} of a core, loop lag p99 {client.lag_p99_s * 1000:.1f} ms"
        f"{' (saturated: ' + client.saturated_because + ')' if client.saturated_because else ''}",
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
        lines += report("baseline", scale, await wave(engine.url, 1, args.prompt_words, args.max_tokens, "solo"))
        cpu_before = cpu_seconds(engine.process.pid)
        result = await wave(engine.url, args.streams, args.prompt_words, args.max_tokens, "load")
        engine_cpu = cpu_seconds(engine.process.pid) - cpu_before
        lines += report("load", scale, result)
        wall = result.ended_at - result.started_at
        lines.append(f"  engine CPU {engine_cpu:.2f} s over {wall:.2f} s wall "
                     f"({engine_cpu / wall:.0%} of one core); all {len(result.records)} streams "
                     f"completed: {all(sum(r.chunk_tokens) == args.max_tokens for r in result.records)}")
        mean_prompt = fmean(record.prompt_tokens for record in result.records)
        lines.append(f"  prompt {mean_prompt:.0f} tokens, {args.max_tokens} output tokens each "
                     "(ignore_eos)")
        print("\n".join(lines))
    finally:
        engine.stop()


if __name__ == "__main__":
    asyncio.run(main())

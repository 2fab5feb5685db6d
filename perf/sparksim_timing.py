"""Real-time fidelity of one sparksim engine: streamed waves at concurrency 1, 2, 4 and 8 and a
prefix-cache hit, observed TTFT and decode speed against the timing model. The suite checks
the model on a simulated clock (tests/sparksim/test_engine_timing.py); this measures how far
the real process strays on this machine. Goal on an idle machine: within 5% (cache-hit TTFT,
only ~0.2 s, within 15%).

    .venv/bin/python -m perf.sparksim_timing [--time-scale 1.0]
"""

import argparse
import asyncio
import tempfile
from pathlib import Path
from statistics import fmean

from perf.sparksim_waves import deviation, engine_wave, wave_figures
from sparksim.standalone import start_engine
from sparksim.timing import DEEPSEEK

MODEL = "deepseek-ai/DeepSeek-V4-Flash-0731"
FLAGS = ("--kv-cache-memory-bytes", "11G", "--max-model-len", "131072")


def filler(words: int, salt: str) -> str:
    return " ".join(f"{salt}{index % 97}" for index in range(words))


async def sweep(scale: float, workdir: Path) -> None:
    engine = start_engine(MODEL, workdir / "sweep.log", *FLAGS, "--no-enable-prefix-caching",
                          time_scale=scale)
    try:
        print("concurrency  TTFT s (model)      dev    decode tok/s (model)  dev")
        for concurrency in (1, 2, 4, 8):
            prompts = [filler(300, f"c{concurrency}r{index}") for index in range(concurrency)]
            c = wave_figures(DEEPSEEK, scale, await engine_wave(engine.url, MODEL, prompts, 128))
            print(f"{concurrency:>11}  {fmean(c.observed_ttft_s):6.3f} ({fmean(c.expected_ttft_s):6.3f})"
                  f"  {c.ttft_deviation:6.1%}  {fmean(c.observed_decode_tok_s):7.2f} "
                  f"({fmean(c.expected_decode_tok_s):7.2f})     {c.decode_deviation:6.1%}")
    finally:
        engine.stop()


async def prefix_cache(scale: float, workdir: Path) -> None:
    engine = start_engine(MODEL, workdir / "cache.log", *FLAGS, time_scale=scale)
    try:
        prompt = filler(3000, "shared")
        (cold,) = (await engine_wave(engine.url, MODEL, [prompt], 4)).records
        (warm,) = (await engine_wave(engine.url, MODEL, [prompt], 4)).records
        # A whole-block prefix is cached: all but the last partial block (16 tokens).
        hits = cold.prompt_tokens - cold.prompt_tokens % 16 or cold.prompt_tokens - 16
        expected = (DEEPSEEK.base_ttft_s + hits / DEEPSEEK.cached_prefill_tok_s
                    + (cold.prompt_tokens - hits) / DEEPSEEK.prefill_tok_s)
        observed = warm.ttft / scale
        print(f"prefix cache: cold TTFT {cold.ttft / scale:.3f} s, warm {observed:.3f} s "
              f"(model {expected:.3f} s, deviation {deviation(observed, expected):.1%})")
    finally:
        engine.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--time-scale", type=float, default=1.0)
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="sparksim-timing-"))
    asyncio.run(sweep(args.time_scale, workdir))
    asyncio.run(prefix_cache(args.time_scale, workdir))


if __name__ == "__main__":
    main()

"""A wave of streams against one real sparksim engine, stream by stream beside what
sparksim's timing model says a perfect engine would have given the same arrivals: the
helpers perf/sparksim_load.py and perf/sparksim_timing.py share. The streams are the
portal's own load generator's (benchmarks.loadgen.run_wave); this module only sets them
beside `sparksim.timing.simulate`. Not a script.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from statistics import fmean

from benchmarks.loadgen import LevelResult, Target, run_wave, wave_client
from sparksim.timing import PlannedRequest, TimingProfile, simulate


async def engine_wave(url: str, model: str, prompts: Sequence[str], output_tokens: int) -> LevelResult:
    """One stream per prompt, all at once, on a client of its own; a failed stream stops
    the measurement (its figures would be no engine's)."""
    async with wave_client(len(prompts), timeout_s=600.0) as client:
        wave = await run_wave(client, Target("direct", url, model), prompts, output_tokens)
    failed = sorted({record.error for record in wave.records if not record.ok})
    if failed:
        raise RuntimeError(f"{len(failed)} distinct errors in a wave of {len(prompts)}: {'; '.join(failed)}")
    return wave


def deviation(observed: float, expected: float) -> float:
    return abs(observed - expected) / expected


@dataclass(frozen=True)
class WaveFigures:
    """Per stream, in simulated units (real seconds / time scale): TTFT and decode speed
    observed and expected, in the same order."""

    observed_ttft_s: list[float]
    expected_ttft_s: list[float]
    observed_decode_tok_s: list[float]
    expected_decode_tok_s: list[float]

    @property
    def concurrency(self) -> int:
        return len(self.observed_ttft_s)

    @property
    def ttft_deviation(self) -> float:
        """Of the means, relative to the model's."""
        return deviation(fmean(self.observed_ttft_s), fmean(self.expected_ttft_s))

    @property
    def decode_deviation(self) -> float:
        return deviation(fmean(self.observed_decode_tok_s), fmean(self.expected_decode_tok_s))


def wave_figures(profile: TimingProfile, time_scale: float, wave: LevelResult, cached_tokens: int = 0,
                 graph_seqs: int | None = None) -> WaveFigures:
    """The model replays the wave's own arrivals and token counts (the server's usage)."""
    records = wave.records
    planned = [PlannedRequest((record.sent_at - wave.started_at) / time_scale, record.prompt_tokens,
                              record.output_tokens, cached_tokens) for record in records]
    expected = simulate(profile, planned, graph_seqs)
    return WaveFigures(
        observed_ttft_s=[record.ttft / time_scale for record in records],
        expected_ttft_s=[line.ttft_s(plan.arrival_s) for line, plan in zip(expected, planned, strict=True)],
        # A one-token stream has no decode span: 0, as the model's figure for it.
        observed_decode_tok_s=[(record.decode_tok_s or 0.0) * time_scale for record in records],
        expected_decode_tok_s=[line.decode_tok_s for line in expected],
    )


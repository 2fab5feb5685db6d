"""The guardian's rules (pure: no I/O): what counts as forward progress, a sane smoke answer,
and the memory floor below which a Spark can wedge. The launch (jobs) and the guardian
(guardian app) both judge with these, so a rule has one place.

- Progress: while a replica has requests running, one of vLLM's token counters advances —
  `vllm:iteration_tokens_total` (every engine step, prefill chunks included: a 150K-token
  cold prefill runs 64 s without a generated token), `vllm:prompt_tokens_total`,
  `vllm:generation_tokens_total`.
- Smoke answer: non-empty, printable text, not one token repeated.
- Memory floor: below it (default 8 GiB) a Spark can wedge and need a power cycle.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

PROGRESS_COUNTERS = (
    "vllm:iteration_tokens_total_count",
    "vllm:iteration_tokens_total_sum",
    "vllm:prompt_tokens_total",
    "vllm:generation_tokens_total",
)
RUNNING_GAUGE = "vllm:num_requests_running"
WAITING_GAUGE = "vllm:num_requests_waiting"

# The launch's last step: a deterministic prompt (temperature 0) whose answer must be sane.
SMOKE_PROMPT = "Reply with one short sentence: are you ready to serve?"
SMOKE_MAX_TOKENS = 16
# The guardian's canary on an idle replica: one real token.
CANARY_PROMPT = "ping"
SMOKE_RULE = "the answer must be non-empty printable text, not one token repeated"
WEDGE_REASON = "below {floor:g} GiB a Spark can wedge and need a power cycle"


def counters_advanced(before: Mapping[str, float], after: Mapping[str, float]) -> bool:
    """Any progress counter moved (a counter that went down is a restarted engine: moved)."""
    return any(after.get(name, 0.0) != before.get(name, 0.0) for name in PROGRESS_COUNTERS)


def busy(values: Mapping[str, float]) -> bool:
    return values.get(RUNNING_GAUGE, 0.0) > 0


@dataclass(frozen=True)
class ProgressVerdict:
    progressed: bool
    misses: int  # ticks in a row with requests running and no counter moved
    stalled: bool


def judge_progress(
    *,
    before: Mapping[str, float] | None,
    after: Mapping[str, float],
    misses: int,
    since_progress_s: float,
    window_s: float,
    misses_to_stall: int,
) -> ProgressVerdict:
    """One reading against the previous one. Stalled: requests ran through `misses_to_stall`
    readings in a row without a counter moving, and no progress for `window_s` (damping: one
    slow moment is not a stall)."""
    if before is None or counters_advanced(before, after):
        return ProgressVerdict(True, 0, False)
    if not busy(after):
        return ProgressVerdict(False, 0, False)  # idle: the canary judges it
    misses += 1
    return ProgressVerdict(False, misses, misses >= misses_to_stall and since_progress_s >= window_s)


def smoke_problem(text: str) -> str | None:
    """Why an answer is not sane, or None. The rule: non-empty, printable, not one token
    repeated (a whitespace-split word, or one character when it has no spaces)."""
    stripped = text.strip()
    if not stripped:
        return "the answer is empty"
    if not all(char.isprintable() or char in "\n\t" for char in stripped):
        return "the answer has unprintable characters"
    words = stripped.split()
    pieces = words if len(words) > 1 else list(stripped)
    if len(pieces) > 1 and len(set(pieces)) == 1:
        return f"the answer is one token repeated ({pieces[0]!r} x {len(pieces)})"
    return None


def memory_floor_problem(*, node: str, available_gib: float, floor_gib: float) -> str | None:
    if floor_gib <= 0 or available_gib >= floor_gib:
        return None
    return (
        f"node {node}: MemAvailable {available_gib:.1f} GiB, below the {floor_gib:g} GiB floor "
        f"({WEDGE_REASON.format(floor=floor_gib)})"
    )

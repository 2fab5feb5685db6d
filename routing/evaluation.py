"""Scoring a version on the labelled evaluation prompts, beside the published version, the
version's other rule (similarity ↔ learned) and honest baselines that the router must beat:
the best single cut on characters and on tokens, and a keyword list.

What is in-sample is said: a length cut fitted on the set it scores, the calibration helper
(it tunes the threshold on the set it reports), a head's accuracy on its own prototypes."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from routing.decision import (
    LEARNED,
    Baseline,
    Evaluation,
    PrototypeSet,
    RouterConfig,
    ThresholdPoint,
    best_threshold,
    decide,
    evaluate,
    keyword_baseline,
    length_baseline,
    threshold_for_share,
)
from routing.engine import router_encoder, stored_embeddings
from routing.learned import LearnedHead
from routing.models import Aggregation, RouterVersion
from routing.published import version_snapshot
from routing.selectors import eval_prompt_list, published_version

# Written from seed 000's description of deepseek's traffic (long generation, reasoning,
# long-file refactoring, architecture review), before looking at any evaluation prompt.
DEEP_KEYWORDS = ("refactor", "architecture", "prove", "proof", "step by step", "design doc", "whitepaper",
                 "essay", "complete", "comprehensive", "entire", "whole", "reason", "derive")


@dataclass(frozen=True)
class RuleScore:
    """One decision rule of the version on the evaluation set (held out: never trained on)."""

    name: str
    accuracy: float
    detail: str


@dataclass(frozen=True)
class EvaluationReport:
    version: RouterVersion
    evaluation: Evaluation
    baselines: tuple[Baseline, ...]
    best: ThresholdPoint | None
    calibrated: ThresholdPoint | None  # the threshold for the requested lane share
    share_lane: str
    share_target: float
    rules: tuple[RuleScore, ...] = ()  # the learned and the similarity rule of this version, side by side
    head: LearnedHead | None = None  # the current learned head (cross-validated and in-sample figures)
    head_stale: bool = False  # trained, but not on the current prototypes/encoder


def _other_rule(prototypes: PrototypeSet, config: RouterConfig) -> tuple[str, PrototypeSet, RouterConfig] | None:
    if config.aggregation == LEARNED:
        if prototypes.head is None:
            return None
        similarity = replace(config, aggregation=Aggregation.MEAN_TOP_K)
        return (f"similarity rule (mean top-{config.top_k}, threshold {config.threshold:.2f})",
                replace(prototypes, head=None), similarity)
    if prototypes.head is None:
        return None
    return (f"learned (floor {config.probability_floor:.2f})", prototypes, replace(config, aggregation=LEARNED))


def evaluate_version(version: RouterVersion, *, share_lane: str = "", share_target: float = 0.34) -> EvaluationReport:
    """`share_target`: seed 000 sent 34% of its traffic to deepseek."""
    encoder = router_encoder()
    prompts = list(eval_prompt_list())
    texts, labels = [p.text for p in prompts], [p.label for p in prompts]
    snapshot = version_snapshot(version, encoder)
    queries = stored_embeddings(encoder, texts)
    evaluation = evaluate(queries, texts, labels, snapshot.prototypes, snapshot.config)
    rules = [RuleScore(_rule_name(snapshot.prototypes, snapshot.config), evaluation.accuracy, "this version's decision")]
    other = _other_rule(snapshot.prototypes, snapshot.config)
    if other is not None:
        name, prototypes, config = other
        rules.append(RuleScore(name, evaluate(queries, texts, labels, prototypes, config).accuracy,
                               "the same prototypes and map, the other rule"))
    expected = [snapshot.config.lane_for(label) for label in labels]
    lanes = evaluation.lanes
    share_lane = share_lane or next((lane for lane in lanes if lane != snapshot.config.default_lane), "")
    others = [lane for lane in lanes if lane != share_lane]
    baselines: list[Baseline] = []
    if len(lanes) >= 2:
        baselines.append(length_baseline([len(t) for t in texts], expected, lanes, unit="characters"))
        baselines.append(length_baseline([encoder.token_count(t) for t in texts], expected, lanes, unit="tokens"))
        baselines.append(keyword_baseline(texts, expected, keywords=DEEP_KEYWORDS, keyword_lane=share_lane,
                                          other_lane=snapshot.config.default_lane or others[0]))
    return EvaluationReport(version, evaluation, tuple(baselines), best_threshold(evaluation),
                            threshold_for_share(evaluation, share_lane, share_target) if share_lane else None,
                            share_lane, share_target, tuple(rules), snapshot.prototypes.head,
                            head_stale=bool(version.learned) and snapshot.prototypes.head is None)


def _rule_name(prototypes: PrototypeSet, config: RouterConfig) -> str:
    if config.aggregation == LEARNED and prototypes.head is not None:
        return f"learned (floor {config.probability_floor:.2f})"
    if config.aggregation == LEARNED:
        return f"learned, untrained: the similarity rule decides (mean top-{config.top_k}, threshold {config.threshold:.2f})"
    return f"similarity rule ({config.aggregation}, threshold {config.threshold:.2f})"


@dataclass(frozen=True)
class ReplayReport:
    """A version replayed offline on captured prompts (gateway.CapturedPrompt)."""

    version: RouterVersion
    against: RouterVersion | None  # the published version
    count: int
    agreement: float | None  # share of prompts where both versions pick the same lane
    shares: dict[str, float]  # the replayed version's predicted share per lane
    rated: int  # prompts whose request has an agent's outcome
    outcome_accuracy: float | None
    changed: tuple[tuple[str, str, str], ...]  # (text, published lane, this version's lane), first ones


def outcome_weighted_accuracy(predicted: Sequence[str], served: Sequence[str], scores: Sequence[float | None]) -> tuple[int, float | None]:
    """Over the requests an agent rated: keeping the lane that served inherits its score;
    choosing another lane earns 1 - score (leaving a failure was right, leaving a success wrong)."""
    pairs = [(p == s, score) for p, s, score in zip(predicted, served, scores, strict=True) if score is not None]
    if not pairs:
        return 0, None
    return len(pairs), sum(score if kept else 1 - score for kept, score in pairs) / len(pairs)


def replay_version(version: RouterVersion, *, texts: Sequence[str], served: Sequence[str],
                   scores: Sequence[float | None], examples: int = 20) -> ReplayReport:
    """Replays `version` (a draft, typically) on captured prompts beside the published version."""
    encoder = router_encoder()
    published = published_version()
    snapshot = version_snapshot(version, encoder)
    queries = stored_embeddings(encoder, list(texts))
    mine = [decide(q, snapshot.prototypes, snapshot.config, usable=lambda _l: True).lane or "" for q in queries]
    theirs: list[str] = []
    if published is not None:
        base = version_snapshot(published, encoder)
        theirs = [decide(q, base.prototypes, base.config, usable=lambda _l: True).lane or "" for q in queries]
    lanes = sorted({*mine, *snapshot.config.label_lanes.values(), snapshot.config.default_lane} - {""})
    rated, accuracy = outcome_weighted_accuracy(mine, served, scores)
    changed = tuple((t, b, a) for t, b, a in zip(texts, theirs, mine, strict=False) if a != b)[:examples]
    return ReplayReport(
        version, published, len(texts),
        sum(a == b for a, b in zip(mine, theirs, strict=True)) / len(texts) if theirs and texts else None,
        {lane: (mine.count(lane) / len(mine) if mine else 0.0) for lane in lanes}, rated, accuracy, changed)

"""Scoring a version on the labelled evaluation prompts, beside the published version and
two baselines (a length cut and a keyword list) that the router must beat."""

from __future__ import annotations

from dataclasses import dataclass

from routing.decision import (
    Baseline,
    Evaluation,
    ThresholdPoint,
    best_threshold,
    evaluate,
    keyword_baseline,
    length_baseline,
    threshold_for_share,
)
from routing.engine import router_encoder, stored_embeddings
from routing.models import RouterVersion
from routing.published import version_snapshot
from routing.selectors import eval_prompt_list

# Written from seed 000's description of deepseek's traffic (long generation, reasoning,
# long-file refactoring, architecture review), before looking at any evaluation prompt.
DEEP_KEYWORDS = ("refactor", "architecture", "prove", "proof", "step by step", "design doc", "whitepaper",
                 "essay", "complete", "comprehensive", "entire", "whole", "reason", "derive")


@dataclass(frozen=True)
class EvaluationReport:
    version: RouterVersion
    evaluation: Evaluation
    baselines: tuple[Baseline, ...]
    best: ThresholdPoint | None
    calibrated: ThresholdPoint | None  # the threshold for the requested lane share
    share_lane: str
    share_target: float


def evaluate_version(version: RouterVersion, *, share_lane: str = "", share_target: float = 0.34) -> EvaluationReport:
    """`share_target`: seed 000 sent 34% of its traffic to deepseek."""
    encoder = router_encoder()
    prompts = list(eval_prompt_list())
    texts, labels = [p.text for p in prompts], [p.label for p in prompts]
    snapshot = version_snapshot(version, encoder)
    evaluation = evaluate(stored_embeddings(encoder, texts), texts, labels, snapshot.prototypes, snapshot.config)
    expected = [snapshot.config.lane_for(label) for label in labels]
    lanes = evaluation.lanes
    share_lane = share_lane or next((lane for lane in lanes if lane != snapshot.config.default_lane), "")
    others = [lane for lane in lanes if lane != share_lane]
    baselines: list[Baseline] = []
    if len(lanes) >= 2:
        baselines.append(length_baseline([encoder.token_count(t) for t in texts], expected, lanes))
        baselines.append(keyword_baseline(texts, expected, keywords=DEEP_KEYWORDS, keyword_lane=share_lane,
                                          other_lane=snapshot.config.default_lane or others[0]))
    return EvaluationReport(version, evaluation, tuple(baselines), best_threshold(evaluation),
                            threshold_for_share(evaluation, share_lane, share_target) if share_lane else None,
                            share_lane, share_target)

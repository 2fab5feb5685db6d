"""The decision and the evaluation as pure functions (no database, no model)."""

from __future__ import annotations

import numpy as np

from routing.decision import (
    PrototypeSet,
    RouterConfig,
    best_threshold,
    decide,
    evaluate,
    length_baseline,
    threshold_for_share,
)


def unit(*values: float) -> np.ndarray:
    vector = np.array(values, dtype=np.float32)
    return vector / np.linalg.norm(vector)


PROTOTYPES = PrototypeSet(
    texts=("prove it", "derive it", "what port", "rename var"),
    labels=("long_reasoning", "long_reasoning", "short_factual", "quick_agent"),
    vectors=np.stack([unit(1, 0, 0), unit(1, 0.2, 0), unit(0, 1, 0), unit(0, 0, 1)]),
)
LANES = {"long_reasoning": "deepseek", "short_factual": "qwen", "quick_agent": "qwen"}


def config(threshold: float = 0.72, aggregation: str = "max", default: str = "qwen") -> RouterConfig:
    return RouterConfig(threshold=threshold, aggregation=aggregation, top_k=2, label_lanes=LANES, default_lane=default)


def everything(lane: str) -> bool:
    return True


def test_a_score_exactly_at_the_threshold_routes_by_label():
    query = unit(1, 0, 0)
    decision = decide(query, PROTOTYPES, config(threshold=float(PROTOTYPES.vectors[0] @ query)), usable=everything)
    assert (decision.lane, decision.reason, decision.label) == ("deepseek", "router", "long_reasoning")
    assert decision.prototype == "prove it"


def test_a_score_just_below_the_threshold_goes_to_the_default_lane():
    query = unit(1, 0.1, 0)
    score = float(np.max(PROTOTYPES.vectors @ query))
    decision = decide(query, PROTOTYPES, config(threshold=score + 1e-6), usable=everything)
    assert (decision.lane, decision.reason) == ("qwen", "default")
    assert decision.label == "long_reasoning"  # the best label is still reported
    assert decision.score is not None and abs(decision.score - score) < 1e-6


def test_threshold_one_sends_everything_but_exact_matches_to_the_default():
    assert decide(unit(1, 0.5, 0.5), PROTOTYPES, config(threshold=1.0), usable=everything).reason == "default"
    assert decide(unit(0, 0, 1), PROTOTYPES, config(threshold=0.999), usable=everything).reason == "router"


def test_threshold_zero_always_routes_by_label():
    decision = decide(unit(-1, -1, -1), PROTOTYPES, config(threshold=-1.0), usable=everything)
    assert decision.reason == "router"


def test_mean_of_top_k_differs_from_max():
    query = unit(1, 0.6, 0)
    by_max = decide(query, PROTOTYPES, config(threshold=0.0), usable=everything)
    by_mean = decide(query, PROTOTYPES, config(threshold=0.0, aggregation="mean_top_k"), usable=everything)
    sims = PROTOTYPES.vectors @ query
    assert by_max.score is not None and abs(by_max.score - float(sims[:2].max())) < 1e-6
    assert by_mean.score is not None and abs(by_mean.score - float(sims[:2].mean())) < 1e-6


def test_a_lane_the_caller_may_not_use_is_never_chosen():
    query = unit(1, 0, 0)
    decision = decide(query, PROTOTYPES, config(threshold=0.1), usable=lambda lane: lane != "deepseek")
    assert decision.lane == "qwen"
    only_deepseek = decide(unit(0, 1, 0), PROTOTYPES, config(threshold=0.5), usable=lambda lane: lane == "deepseek")
    assert (only_deepseek.lane, only_deepseek.reason) == ("deepseek", "fallback")
    nothing = decide(query, PROTOTYPES, config(threshold=0.1), usable=lambda lane: False)
    assert nothing.lane is None


def test_top_matches_are_the_five_best_scores_in_order():
    # Eight prototypes, all close to the query, listed out of score order: the cap is
    # reached and only a real top-five (not the first five) passes.
    angles = (0.9, 0.1, 0.7, 0.3, 1.1, 0.5, 0.2, 0.6)
    many = PrototypeSet(
        texts=tuple(f"p{i}" for i in range(len(angles))),
        labels=("long_reasoning",) * len(angles),
        vectors=np.stack([unit(1, angle, 0) for angle in angles]),
    )
    query = unit(1, 0, 0)
    decision = decide(query, many, config(), usable=everything)
    sims = many.vectors @ query
    best_five = sorted(range(len(angles)), key=lambda i: -sims[i])[:5]
    assert [m.text for m in decision.top] == [f"p{i}" for i in best_five] == ["p1", "p6", "p3", "p5", "p7"]
    assert [m.score for m in decision.top] == [float(sims[i]) for i in best_five]


def test_no_prototype_at_all_goes_to_the_default_lane():
    empty = PrototypeSet((), (), np.zeros((0, 3), dtype=np.float32))
    assert decide(unit(1, 0, 0), empty, config(), usable=everything).reason == "default"


def test_evaluation_counts_a_confusion_matrix_and_sweeps_thresholds():
    queries = np.stack([unit(1, 0.05, 0), unit(0, 1, 0.1), unit(0.1, 0, 1), unit(0.5, 0.5, 0.5)])
    labels = ["long_reasoning", "short_factual", "quick_agent", "long_reasoning"]
    result = evaluate(queries, ["a", "b", "c", "d"], labels, PROTOTYPES, config(threshold=0.9))
    assert result.lanes == ("deepseek", "qwen")
    # d scores ~0.6 with long_reasoning: under 0.9 it goes to the default lane, a mistake.
    assert result.confusion == ((1, 1), (0, 2))
    assert result.accuracy == 0.75
    assert [m[0] for m in result.mistakes] == ["d"]
    best = best_threshold(result)
    assert best is not None and best.accuracy == 1.0 and best.threshold <= 0.6
    half = threshold_for_share(result, "deepseek", 0.5)
    assert half is not None and half.shares["deepseek"] == 0.5


def test_the_length_baseline_finds_the_best_single_cut():
    baseline = length_baseline([5, 6, 50, 60], ["qwen", "qwen", "deepseek", "deepseek"], ["qwen", "deepseek"])
    assert baseline.accuracy == 1.0 and "over 6 tokens → deepseek" in baseline.detail

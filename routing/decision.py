"""The router's decision and its evaluation: pure functions over embeddings (no I/O).

A query's score for a label is its cosine similarity to that label's prototypes,
aggregated (max, or mean of the label's top-k). The best label above the threshold picks
its lane; below it, the default lane. The learned aggregation instead asks a logistic head
(routing.learned) for each lane's probability: the best lane at or above the probability
floor, else the default lane. Lanes the caller cannot use (the key may not, or the lane is
not serving) are skipped, never chosen."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from routing.learned import LearnedHead, lane_probabilities

Matrix = np.ndarray[Any, np.dtype[np.float32]]

REASON_ROUTER = "router"
REASON_DEFAULT = "default"
REASON_FALLBACK = "fallback"
LEARNED = "learned"


@dataclass(frozen=True)
class RouterConfig:
    threshold: float
    aggregation: str  # "max" | "mean_top_k"
    top_k: int
    label_lanes: Mapping[str, str]
    default_lane: str
    probability_floor: float = 0.5

    def lane_for(self, label: str) -> str:
        return self.label_lanes.get(label) or self.default_lane


@dataclass(frozen=True)
class PrototypeSet:
    """The prototypes of one version with their embeddings, rows aligned."""

    texts: tuple[str, ...]
    labels: tuple[str, ...]
    vectors: Matrix  # (n, d), L2-normalised
    head: LearnedHead | None = None  # the learned aggregation's, when trained on exactly these
    label_names: tuple[str, ...] = field(init=False)
    label_rows: tuple[np.ndarray[Any, Any], ...] = field(init=False)

    def __post_init__(self) -> None:
        names = tuple(sorted(set(self.labels)))
        labels = np.array(self.labels, dtype=object)
        object.__setattr__(self, "label_names", names)
        object.__setattr__(self, "label_rows", tuple(np.flatnonzero(labels == name) for name in names))


@dataclass(frozen=True)
class Match:
    text: str
    label: str
    score: float


@dataclass(frozen=True)
class Decision:
    lane: str | None  # None: no lane the caller may use
    reason: str
    label: str
    score: float | None
    prototype: str
    top: tuple[Match, ...] = ()


def label_scores(similarities: Matrix, prototypes: PrototypeSet, *, aggregation: str, top_k: int) -> Matrix:
    """(m, n) similarities → (m, L) label scores, columns in `prototypes.label_names` order."""
    columns = []
    for rows in prototypes.label_rows:
        block = similarities[:, rows]
        # "learned" without a current head falls back to the mean of the top-k.
        if aggregation in ("mean_top_k", LEARNED) and block.shape[1] > 1:
            k = min(top_k, block.shape[1])
            best = -np.partition(-block, k - 1, axis=1)[:, :k]
            columns.append(best.mean(axis=1))
        else:
            columns.append(block.max(axis=1))
    if not columns:
        return np.zeros((similarities.shape[0], 0), dtype=np.float32)
    return np.stack(columns, axis=1).astype(np.float32)


def decide(
    query: Matrix, prototypes: PrototypeSet, config: RouterConfig, *, usable: Callable[[str], bool], top_n: int = 5
) -> Decision:
    """One query vector (d,) → the lane. One matrix product against every prototype."""
    if not prototypes.texts:
        return _default(config, usable, score=None, label="", prototype="", top=())
    sims = prototypes.vectors @ query
    order = np.argsort(-sims)[:top_n]
    top = tuple(Match(prototypes.texts[i], prototypes.labels[i], float(sims[i])) for i in order)
    scores = label_scores(sims[None, :], prototypes, aggregation=config.aggregation, top_k=config.top_k)[0]
    best_index = int(order[0])
    if config.aggregation == LEARNED and prototypes.head is not None:
        return _decide_learned(query, prototypes, prototypes.head, sims, config, usable, top)
    for column in np.argsort(-scores):
        score = float(scores[column])
        if score < config.threshold:
            break
        label = prototypes.label_names[column]
        lane = config.lane_for(label)
        if usable(lane):
            return Decision(lane, REASON_ROUTER, label, score, _best_of(prototypes, sims, label), top)
    best_label = prototypes.labels[best_index]
    return _default(config, usable, score=float(scores.max()), label=best_label,
                    prototype=prototypes.texts[best_index], top=top)


def routed_lanes(config: RouterConfig) -> tuple[str, ...]:
    return tuple(sorted({*config.label_lanes.values(), config.default_lane} - {""}))


def _decide_learned(query: Matrix, prototypes: PrototypeSet, head: LearnedHead, sims: Matrix, config: RouterConfig,
                    usable: Callable[[str], bool], top: tuple[Match, ...]) -> Decision:
    label_probs = head.probabilities(query[None, :])[0]
    lanes = routed_lanes(config)
    probs = lane_probabilities(label_probs[None, :], head.classes, config.lane_for, lanes)[0]
    best_label = head.classes[int(np.argmax(label_probs))]
    for column in np.argsort(-probs):
        probability = float(probs[column])
        if probability < config.probability_floor:
            break
        lane = lanes[column]
        if usable(lane):
            # The lane's most probable label names the decision ("why did this go to deepseek?").
            label = max((c for c in head.classes if config.lane_for(c) == lane),
                        key=lambda c: label_probs[head.classes.index(c)])
            return Decision(lane, REASON_ROUTER, label, probability, _best_of(prototypes, sims, label), top)
    return _default(config, usable, score=float(probs.max()), label=best_label,
                    prototype=_best_of(prototypes, sims, best_label), top=top)


def _best_of(prototypes: PrototypeSet, sims: Matrix, label: str) -> str:
    if label not in prototypes.label_names:
        return ""
    rows = prototypes.label_rows[prototypes.label_names.index(label)]
    return prototypes.texts[int(rows[int(np.argmax(sims[rows]))])]


def _default(config: RouterConfig, usable: Callable[[str], bool], *, score: float | None, label: str,
             prototype: str, top: tuple[Match, ...]) -> Decision:
    if config.default_lane and usable(config.default_lane):
        return Decision(config.default_lane, REASON_DEFAULT, label, score, prototype, top)
    # The default lane is not usable: any lane the version routes to, in a stable order.
    for lane in sorted(set(config.label_lanes.values())):
        if usable(lane):
            return Decision(lane, REASON_FALLBACK, label, score, prototype, top)
    return Decision(None, REASON_FALLBACK, label, score, prototype, top)


# --- evaluation -------------------------------------------------------------------------

THRESHOLDS = tuple(round(step / 100, 2) for step in range(0, 101, 2))


@dataclass(frozen=True)
class ThresholdPoint:
    threshold: float
    accuracy: float
    shares: dict[str, float]


@dataclass(frozen=True)
class Evaluation:
    count: int
    accuracy: float
    lanes: tuple[str, ...]
    confusion: tuple[tuple[int, ...], ...]  # [expected][predicted], in `lanes` order
    shares: dict[str, float]  # predicted share per lane
    sweep: tuple[ThresholdPoint, ...]
    mistakes: tuple[tuple[str, str, str, str, float], ...]  # text, label, expected lane, predicted lane, score


def version_scores(queries: Matrix, prototypes: PrototypeSet, config: RouterConfig) -> tuple[Matrix, tuple[str, ...]]:
    """The version's rule as (m, columns) scores and each column's lane: label scores for
    the similarity rule, lane probabilities for the learned one. The best column at or above
    the threshold (the floor) wins, else the default lane."""
    if config.aggregation == LEARNED and prototypes.head is not None:
        lanes = routed_lanes(config)
        probs = prototypes.head.probabilities(queries)
        return lane_probabilities(probs, prototypes.head.classes, config.lane_for, lanes), lanes
    sims = queries @ prototypes.vectors.T
    scores = label_scores(sims, prototypes, aggregation=config.aggregation, top_k=config.top_k)
    return scores, tuple(config.lane_for(name) for name in prototypes.label_names)


def version_threshold(config: RouterConfig, prototypes: PrototypeSet) -> float:
    return config.probability_floor if config.aggregation == LEARNED and prototypes.head is not None else config.threshold


def _predict(scores: Matrix, column_lanes: Sequence[str], default_lane: str, threshold: float) -> list[str]:
    best = scores.argmax(axis=1)
    return [column_lanes[int(col)] if scores[row, col] >= threshold else default_lane for row, col in enumerate(best)]


def evaluate(
    queries: Matrix, texts: Sequence[str], labels: Sequence[str], prototypes: PrototypeSet, config: RouterConfig,
    *, thresholds: Sequence[float] = THRESHOLDS,
) -> Evaluation:
    """Scores a version on labelled prompts: the expected lane of a prompt is its label's lane."""
    expected = [config.lane_for(label) for label in labels]
    if not len(texts) or not prototypes.texts:
        return Evaluation(0, 0.0, (), (), {}, (), ())
    scores, column_lanes = version_scores(queries, prototypes, config)
    lanes = tuple(sorted({*expected, *config.label_lanes.values(), config.default_lane} - {""}))
    predicted = _predict(scores, column_lanes, config.default_lane, version_threshold(config, prototypes))
    index = {lane: i for i, lane in enumerate(lanes)}
    confusion = [[0] * len(lanes) for _ in lanes]
    for want, got in zip(expected, predicted, strict=True):
        confusion[index[want]][index[got]] += 1
    best_scores = scores.max(axis=1)
    mistakes = tuple(
        (texts[i], labels[i], expected[i], predicted[i], float(best_scores[i]))
        for i in range(len(texts)) if expected[i] != predicted[i]
    )
    sweep = tuple(
        ThresholdPoint(t, _accuracy(expected, pred), _shares(pred, lanes))
        for t in thresholds for pred in [_predict(scores, column_lanes, config.default_lane, t)]
    )
    return Evaluation(len(texts), _accuracy(expected, predicted), lanes,
                      tuple(tuple(row) for row in confusion), _shares(predicted, lanes), sweep, mistakes)


def _accuracy(expected: Sequence[str], predicted: Sequence[str]) -> float:
    return sum(a == b for a, b in zip(expected, predicted, strict=True)) / len(expected) if expected else 0.0


def _shares(predicted: Sequence[str], lanes: Sequence[str]) -> dict[str, float]:
    return {lane: (sum(p == lane for p in predicted) / len(predicted) if predicted else 0.0) for lane in lanes}


def best_threshold(evaluation: Evaluation) -> ThresholdPoint | None:
    """The threshold that maximises accuracy (the lowest of equals)."""
    return max(evaluation.sweep, key=lambda p: (p.accuracy, -p.threshold), default=None)


def threshold_for_share(evaluation: Evaluation, lane: str, share: float) -> ThresholdPoint | None:
    """The threshold that sends closest to `share` of the prompts to `lane` (RouteLLM's
    calibrate_threshold, on labelled prompts instead of a traffic sample)."""
    return min(evaluation.sweep, key=lambda p: (abs(p.shares.get(lane, 0.0) - share), -p.accuracy), default=None)


# --- baselines (what the router must beat) ----------------------------------------------

@dataclass(frozen=True)
class Baseline:
    name: str
    accuracy: float
    detail: str


def length_baseline(lengths: Sequence[int], expected: Sequence[str], lanes: Sequence[str], *,
                    unit: str = "tokens") -> Baseline:
    """The best single cut on prompt length (in `unit`: tokens or characters), fitted on the
    prompts themselves, so an in-sample upper bound of what a length rule can do: longer goes
    to one lane, shorter to another."""
    name = f"length only ({unit}, best cut fitted on this set: in-sample)"
    best = Baseline(name, 0.0, "")
    cuts = sorted(set(lengths))
    for long_lane in lanes:
        for short_lane in lanes:
            if long_lane == short_lane:
                continue
            for cut in cuts:
                predicted = [long_lane if n > cut else short_lane for n in lengths]
                accuracy = _accuracy(expected, predicted)
                if accuracy > best.accuracy:
                    best = Baseline(name, accuracy, f"over {cut} {unit} → {long_lane}, else {short_lane}")
    return best


def keyword_baseline(texts: Sequence[str], expected: Sequence[str], *, keywords: Sequence[str],
                     keyword_lane: str, other_lane: str) -> Baseline:
    """A fixed keyword list (written from seed 000's description, not from the prompts)."""
    lowered = [text.lower() for text in texts]
    predicted = [keyword_lane if any(k in text for k in keywords) else other_lane for text in lowered]
    return Baseline("keywords", _accuracy(expected, predicted), f"{len(keywords)} keywords → {keyword_lane}, else {other_lane}")

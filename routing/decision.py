"""The router's decision and its evaluation: pure functions over embeddings (no I/O).

A query's score for a label is its cosine similarity to that label's prototypes,
aggregated (max, or mean of the label's top-k). The best label above the threshold picks
its lane; below it, the default lane. Lanes the caller cannot use (the key may not, or
the lane is not serving) are skipped, never chosen."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

Matrix = np.ndarray[Any, np.dtype[np.float32]]

REASON_ROUTER = "router"
REASON_DEFAULT = "default"
REASON_FALLBACK = "fallback"


@dataclass(frozen=True)
class RouterConfig:
    threshold: float
    aggregation: str  # "max" | "mean_top_k"
    top_k: int
    label_lanes: Mapping[str, str]
    default_lane: str

    def lane_for(self, label: str) -> str:
        return self.label_lanes.get(label) or self.default_lane


@dataclass(frozen=True)
class PrototypeSet:
    """The prototypes of one version with their embeddings, rows aligned."""

    texts: tuple[str, ...]
    labels: tuple[str, ...]
    vectors: Matrix  # (n, d), L2-normalised
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
        if aggregation == "mean_top_k" and block.shape[1] > 1:
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


def _best_of(prototypes: PrototypeSet, sims: Matrix, label: str) -> str:
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


def _predict(scores: Matrix, prototypes: PrototypeSet, config: RouterConfig, threshold: float) -> list[str]:
    best = scores.argmax(axis=1)
    return [
        config.lane_for(prototypes.label_names[int(col)]) if scores[row, col] >= threshold else config.default_lane
        for row, col in enumerate(best)
    ]


def evaluate(
    queries: Matrix, texts: Sequence[str], labels: Sequence[str], prototypes: PrototypeSet, config: RouterConfig,
    *, thresholds: Sequence[float] = THRESHOLDS,
) -> Evaluation:
    """Scores a version on labelled prompts: the expected lane of a prompt is its label's lane."""
    expected = [config.lane_for(label) for label in labels]
    if not len(texts) or not prototypes.texts:
        return Evaluation(0, 0.0, (), (), {}, (), ())
    sims = queries @ prototypes.vectors.T
    scores = label_scores(sims, prototypes, aggregation=config.aggregation, top_k=config.top_k)
    lanes = tuple(sorted({*expected, *config.label_lanes.values(), config.default_lane} - {""}))
    predicted = _predict(scores, prototypes, config, config.threshold)
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
        for t in thresholds for pred in [_predict(scores, prototypes, config, t)]
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


def length_baseline(lengths: Sequence[int], expected: Sequence[str], lanes: Sequence[str]) -> Baseline:
    """The best single cut on prompt length (tokens), fitted on the prompts themselves, so
    an upper bound of what a length rule can do: longer goes to one lane, shorter to another."""
    best = Baseline("length only", 0.0, "")
    cuts = sorted(set(lengths))
    for long_lane in lanes:
        for short_lane in lanes:
            if long_lane == short_lane:
                continue
            for cut in cuts:
                predicted = [long_lane if n > cut else short_lane for n in lengths]
                accuracy = _accuracy(expected, predicted)
                if accuracy > best.accuracy:
                    best = Baseline("length only", accuracy, f"over {cut} tokens → {long_lane}, else {short_lane}")
    return best


def keyword_baseline(texts: Sequence[str], expected: Sequence[str], *, keywords: Sequence[str],
                     keyword_lane: str, other_lane: str) -> Baseline:
    """A fixed keyword list (written from seed 000's description, not from the prompts)."""
    lowered = [text.lower() for text in texts]
    predicted = [keyword_lane if any(k in text for k in keywords) else other_lane for text in lowered]
    return Baseline("keywords", _accuracy(expected, predicted), f"{len(keywords)} keywords → {keyword_lane}, else {other_lane}")

"""Training the learned decision (routing.learned) with scikit-learn, in a worker job.

Deterministic (lbfgs, fixed random_state, prototypes in a fixed order): the same prototypes
and encoder give the same head, bit for bit, so retraining unchanged prototypes changes
nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from routing.learned import LearnedHead, Matrix, prototypes_sha

# Regularisation: embeddings are unit vectors, so the weights need room (C large).
# Chosen by 5-fold cross-validation on the starter prototypes only (C in 1, 3, 10, 30, 100:
# 10 was best), never on the evaluation set.
LEARNED_C = 10.0
CV_FOLDS = 5
RANDOM_STATE = 0
CV_MIN_PER_LABEL = 2  # a label takes part in cross-validation with two prototypes or more


class TrainingRefused(ValueError):
    """The prototypes cannot train a head (too few, one label only): says which rule."""


def _ordered(vectors: Matrix, labels: Sequence[str], texts: Sequence[str]) -> tuple[Matrix, list[str]]:
    order = sorted(range(len(labels)), key=lambda i: (labels[i], texts[i]))
    return vectors[order], [labels[i] for i in order]


def train_head(vectors: Matrix, texts: Sequence[str], labels: Sequence[str], *, encoder: str,
               lane_for: Callable[[str], str]) -> LearnedHead:
    """Fits the head on every prototype, and scores it by stratified k-fold cross-validation
    (lane-level accuracy: a label confused with another of the same lane routes right)."""
    # scikit-learn loads here, in the process that trains (the worker), not at import: every
    # web and gateway process imports this module, and scikit-learn costs them ~100 MB and
    # 1-4 s of start-up (measured with /usr/bin/time) for nothing they run.
    from sklearn.linear_model import LogisticRegression
    from sklearn.model_selection import StratifiedKFold, cross_val_predict

    counts: dict[str, int] = {}
    for label in labels:
        counts[label] = counts.get(label, 0) + 1
    if len(counts) < 2:
        raise TrainingRefused("prototypes: a learned decision needs at least two labels.")
    x, y = _ordered(np.asarray(vectors, dtype=np.float64), labels, texts)

    def model() -> Any:
        return LogisticRegression(C=LEARNED_C, max_iter=5000, random_state=RANDOM_STATE)

    fitted = model().fit(x, y)
    in_sample = fitted.predict(x)

    def lane_accuracy(want: Sequence[str], predicted: Sequence[str]) -> float:
        return float(np.mean([lane_for(a) == lane_for(b) for a, b in zip(want, predicted, strict=True)]))

    # A label with a single prototype (just added) is learned but cannot be held out: the
    # cross-validation runs on the labels with two or more.
    rows = [i for i, label in enumerate(y) if counts[label] >= CV_MIN_PER_LABEL]
    cv_y = [y[i] for i in rows]
    cv_accuracy = 0.0
    if len(set(cv_y)) >= 2:
        folds = min(CV_FOLDS, min(counts[label] for label in cv_y))
        held_out = cross_val_predict(model(), x[rows], cv_y, cv=StratifiedKFold(folds, shuffle=True, random_state=RANDOM_STATE))
        cv_accuracy = lane_accuracy(cv_y, list(held_out))
    return LearnedHead(encoder, prototypes_sha(texts, labels), tuple(str(c) for c in fitted.classes_),
                       fitted.coef_.astype(np.float32), fitted.intercept_.astype(np.float32),
                       round(cv_accuracy, 4), round(lane_accuracy(y, list(in_sample)), 4))

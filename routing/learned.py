"""The learned decision: a logistic regression over the encoder's embeddings of a version's
labelled prototypes (routing.training fits it with scikit-learn; numpy applies it here, so the request path
never imports scikit-learn). Pure functions, no I/O."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Matrix = np.ndarray[Any, np.dtype[np.float32]]

@dataclass(frozen=True)
class LearnedHead:
    """What the job stores with the version: applied as softmax(x @ coef.T + intercept)."""

    encoder: str
    prototypes_sha: str
    classes: tuple[str, ...]
    coef: Matrix  # (L, d)
    intercept: Matrix  # (L,)
    cv_accuracy: float  # lane-level, cross-validated on the prototypes (held-out folds)
    train_accuracy: float  # lane-level, on the prototypes it was trained on (in-sample)

    def probabilities(self, queries: Matrix) -> Matrix:
        """(m, d) → (m, L) label probabilities, columns in `classes` order."""
        logits = queries @ self.coef.T + self.intercept
        logits = logits - logits.max(axis=1, keepdims=True)
        exp = np.exp(logits)
        return (exp / exp.sum(axis=1, keepdims=True)).astype(np.float32)

    def to_json(self) -> dict[str, Any]:
        return {"encoder": self.encoder, "prototypes_sha": self.prototypes_sha, "classes": list(self.classes),
                "coef": self.coef.astype(np.float32).tolist(), "intercept": self.intercept.astype(np.float32).tolist(),
                "cv_accuracy": self.cv_accuracy, "train_accuracy": self.train_accuracy}

    @classmethod
    def from_json(cls, raw: Mapping[str, Any]) -> LearnedHead:
        return cls(str(raw["encoder"]), str(raw["prototypes_sha"]), tuple(raw["classes"]),
                   np.asarray(raw["coef"], dtype=np.float32), np.asarray(raw["intercept"], dtype=np.float32),
                   float(raw["cv_accuracy"]), float(raw["train_accuracy"]))


def prototypes_sha(texts: Sequence[str], labels: Sequence[str]) -> str:
    """Identifies the training set (order-free): a head is current while this is unchanged."""
    digest = hashlib.sha256()
    for label, text in sorted(zip(labels, texts, strict=True)):
        digest.update(f"{label}\x00{text}\x01".encode())
    return digest.hexdigest()


def lane_probabilities(label_probs: Matrix, classes: Sequence[str], lane_for: Callable[[str], str],
                       lanes: Sequence[str]) -> Matrix:
    """(m, L) label probabilities → (m, lanes) lane probabilities: a lane's is the sum of its
    labels' (two fast labels at 0.3 each outweigh one deep label at 0.4)."""
    out = np.zeros((label_probs.shape[0], len(lanes)), dtype=np.float32)
    index = {lane: i for i, lane in enumerate(lanes)}
    for column, label in enumerate(classes):
        lane = lane_for(label)
        if lane in index:
            out[:, index[lane]] += label_probs[:, column]
    return out

"""Schemas of the router's management API (/api/router/...): versions, activate, revert.
The shadow run and its judged comparison are the gateway's (gateway/schemas.py): they read
its request log."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Schema


class LearnedOut(Schema):
    """The version's learned head, as stored (not whether it is current for the encoder now:
    the version's page says that, and a stale head cannot be activated)."""

    encoder: str
    cv_accuracy: float  # lane-level, 5-fold cross-validated on the prototypes (held out)
    train_accuracy: float  # on the prototypes it was trained on (in-sample)
    trained_at: datetime | None


class VersionOut(Schema):
    number: int
    status: str  # draft | published (active) | retired
    note: str
    aggregation: str
    threshold: float
    top_k: int
    probability_floor: float
    label_lanes: dict[str, str]
    default_lane: str
    prototypes: int  # a draft's: the enabled prototypes now; else its frozen set
    train_state: str
    train_error: str
    learned: LearnedOut | None
    shadow: bool
    created_by: str | None
    created_at: datetime
    published_by: str | None
    published_at: datetime | None


class PrototypeRef(Schema):
    text: str
    label: str


class ChangesOut(Schema):
    """What making `to` the active version changes against `against` (the active one)."""

    against: int | None
    to: int
    settings: dict[str, list[Any]]  # field: [active, after]
    added: list[PrototypeRef]
    removed: list[PrototypeRef]


class ActivatedOut(Schema):
    version: VersionOut
    changes: ChangesOut  # what the step changed (against the version active before it)


class RevertPreviewOut(Schema):
    active: int | None
    previous: int | None  # what a revert restores (none: a revert is refused)
    changes: ChangesOut | None

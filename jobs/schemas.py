"""API schemas (explicit fields)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from ninja import Field, Schema

from core.api import InSchema


class JobOut(Schema):
    id: int
    kind: str
    state: str
    lane: str | None
    nodes: list[str]
    created_by: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    heartbeat_at: datetime | None
    error: str
    cancel_requested: bool
    last_seq: int
    duration_s: float | None

    @staticmethod
    def resolve_lane(obj: Any) -> str | None:
        return obj.lane.name if obj.lane else None

    @staticmethod
    def resolve_nodes(obj: Any) -> list[str]:
        return list(obj.params.get("nodes") or [])

    @staticmethod
    def resolve_created_by(obj: Any) -> str | None:
        return obj.created_by.get_username() if obj.created_by else None

    @staticmethod
    def resolve_cancel_requested(obj: Any) -> bool:
        return obj.cancel_requested_at is not None


class JobStepOut(Schema):
    position: int
    key: str
    phase: str
    node: str
    title: str
    state: str
    started_at: datetime | None
    finished_at: datetime | None
    duration_s: float | None
    exit_code: int | None
    detail: str


class JobDetailOut(JobOut):
    params: dict[str, Any]
    revision: int | None
    result: dict[str, Any]
    traceback: str
    steps: list[JobStepOut]

    @staticmethod
    def resolve_revision(obj: Any) -> int | None:
        return obj.lane_revision.number if obj.lane_revision else None

    @staticmethod
    def resolve_steps(obj: Any) -> list[Any]:
        return list(obj.steps.order_by("position"))


class LogLineOut(Schema):
    seq: int
    time: datetime = Field(..., alias="created_at")
    node: str
    stream: str
    text: str


class LogPageOut(Schema):
    lines: list[LogLineOut]
    first_seq: int
    last_seq: int
    has_earlier: bool


class LogSearchOut(Schema):
    lines: list[LogLineOut]
    total: int


class JobParamsIn(InSchema):
    params: dict[str, Any] = {}


class FabricJobIn(InSchema):
    nodes: list[str]
    params: dict[str, Any] = {}


class FabricResultOut(Schema):
    id: int
    kind: str
    node_set: str
    job: int | None
    created_at: datetime
    verdict: str
    headline: float | None
    headline_unit: str
    summary: dict[str, Any]

    @staticmethod
    def resolve_job(obj: Any) -> int | None:
        return obj.job_id


class WatchdogOut(Schema):
    lane: str
    enabled: bool
    threshold_us: float
    recover_below_us: float | None
    window: int
    samples: list[float]
    average_us: float | None
    degraded: bool
    last_measured_at: datetime | None
    last_error: str
    context_limit: int  # the tokens the lane takes now (its degraded limit while degraded)

    @staticmethod
    def resolve_lane(obj: Any) -> str:
        return obj.lane.name

    @staticmethod
    def resolve_context_limit(obj: Any) -> int:
        return int(obj.lane.current_context_limit)


class WatchdogIn(InSchema):
    enabled: bool | None = None
    threshold_us: float | None = None
    recover_below_us: float | None = None
    window: int | None = None


class DriftChangeOut(Schema):
    field: str
    running: Any
    latest: Any


class LaneDriftOut(Schema):
    running: int | None
    latest: int
    drifted: bool
    job: int | None
    changes: list[DriftChangeOut]

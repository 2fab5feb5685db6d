"""Benchmarks API (/api/benchmarks...): every role reads runs, their levels, comparisons and
exports; admins (operate) start sweeps, as on the pages. Parameters are checked in one place,
the service (benchmarks.params through jobs.params): this module passes them on untouched, so
a bad one answers 422 naming the field and the rule, whichever entry point it came through.
Cancel a sweep with POST /api/jobs/{id}/cancel (a run's id is its job's)."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from django.http import HttpRequest
from ninja import Field, Query, Router, Schema, Status
from pydantic import BaseModel, ConfigDict

from benchmarks.selectors import compare_runs, export_json, export_rows, run_list, run_or_404, run_payload
from benchmarks.services import benchmark_start_named
from core.api import can_operate
from core.responses import csv_response
from core.validators import INT64_MAX
from jobs.schemas import JobOut

router = Router(tags=["benchmarks"])

ANY_DOC = "checked by the service; see docs/guide-admin.md, Benchmarks, for the rule"


class BenchmarkIn(BaseModel):
    """A sweep: the lane by name and the sweep's parameters, flat. Types are not enforced
    here but by the service, so every entry point gives the same error for the same input;
    a plain pydantic model, because ninja's Schema drops unknown keys the service must refuse."""

    model_config = ConfigDict(extra="allow")

    lane: Any = Field(None, description="the lane's name")
    concurrency: Any = Field(None, description="list of concurrency levels, e.g. [1, 2, 4, 8]")
    request_rates: Any = Field(None, description="list of Poisson request rates (req/s), instead of concurrency")
    prompt_tokens: Any = Field(None, description="prompt length in tokens (default 512)")
    output_tokens: Any = Field(None, description="fixed output length (max_tokens + min_tokens + ignore_eos)")
    cache_mode: Any = Field(None, description="cold (unique prompts, default) or cache_hit (prime then repeat)")
    targets: Any = Field(None, description='["direct"] (default), ["gateway"] or both')
    warmup: Any = Field(None, description="requests per level sent first and discarded")
    requests_per_level: Any = Field(None, description="requests per level (default: one per concurrency slot)")
    duration_s: Any = Field(None, description="or: send for this many seconds per level")
    timeout_s: Any = Field(None, description="per-request timeout (default 600)")
    idle_timeout_s: Any = Field(None, description="longest silence between chunks before a request fails")
    replay: Any = Field(None, description='a request-log window to replay instead of a sweep: {"since": ISO 8601, '
                                          '"until": ISO 8601, "lane": optional, "speed": 1}')
    slo_ttft_ms: Any = Field(None, description="goodput's TTFT bound (from the schedule on open-loop levels)")
    slo_tpot_ms: Any = Field(None, description="goodput's TPOT bound")
    slice_s: Any = Field(None, description="per-time-slice results of this width (a replay: 60 s by default)")
    label: Any = Field(None, description="free text shown beside the run")
    time_limit_s: Any = Field(None, description="the job's time limit")


class BenchmarkRunOut(Schema):
    job: int
    state: str
    lane: str
    revision: int | None
    label: str
    cache_mode: str | None
    levels_planned: int
    levels_done: int
    created_by: str | None
    created_at: datetime


class BenchmarkLevelOut(Schema):
    job: int
    position: int
    target: str
    concurrency: int | None
    request_rate: float | None
    label: str
    stats: dict[str, Any]
    metrics: dict[str, Any]
    fabric: dict[str, Any]
    prime: dict[str, Any]


class BenchmarkRunDetailOut(Schema):
    job: int
    state: str
    lane: str
    revision: int | None
    label: str
    params: dict[str, Any]
    levels_planned: int
    levels: list[BenchmarkLevelOut]
    gateway_added: list[dict[str, Any]]


class CompareFigureOut(Schema):
    name: str
    unit: str
    a: float | None
    b: float | None
    delta: float | None
    relative: float | None


class CompareRowOut(Schema):
    target: str
    level: str
    figures: list[CompareFigureOut]


class CompareOut(Schema):
    a: BenchmarkRunDetailOut
    b: BenchmarkRunDetailOut
    rows: list[CompareRowOut]


class RunFilters(Schema):
    lane: str = Field("", max_length=63)
    limit: int = Field(50, ge=1, le=500)
    offset: int = Field(0, ge=0, le=10**9)


def _summary(run: Any) -> dict[str, Any]:
    return {
        "job": run.job_id, "state": run.job.state, "lane": run.lane_name, "revision": run.revision_number,
        "label": run.label, "cache_mode": run.params.get("cache_mode"), "levels_planned": run.levels_planned,
        "levels_done": run.levels_done, "created_at": run.created_at,
        "created_by": run.job.created_by.get_username() if run.job.created_by else None,
    }


@router.post("/benchmarks", response={201: JobOut}, auth=can_operate)
def start_benchmark(request: HttpRequest, payload: BenchmarkIn) -> Any:
    """Start a sweep on the lane's current revision; the answer is the queued job (its id is
    the run's). Follow it with GET /api/benchmarks/{id} or the job's log."""
    body = payload.model_dump()
    lane = body.pop("lane", None)
    params = {name: value for name, value in {**body, **(payload.model_extra or {})}.items() if value is not None}
    return Status(201, benchmark_start_named(lane_name=lane, user=request.user, params=params))


@router.get("/benchmarks", response=list[BenchmarkRunOut])
def list_benchmarks(request: HttpRequest, filters: Query[RunFilters]) -> Any:
    runs = run_list()
    if filters.lane:
        runs = runs.filter(lane_name=filters.lane)
    return [_summary(run) for run in runs[filters.offset: filters.offset + filters.limit]]


@router.get("/benchmarks/compare", response=CompareOut)
def compare_benchmarks(request: HttpRequest, a: int = Query(..., ge=1, le=INT64_MAX),
                       b: int = Query(..., ge=1, le=INT64_MAX)) -> Any:
    """Two runs side by side: per (target, level) each summary figure of a and b, b − a and
    (b − a)/a."""
    first, second = run_or_404(a), run_or_404(b)
    return {"a": run_payload(first), "b": run_payload(second), "rows": compare_runs(first, second)}


@router.get("/benchmarks/{int:job_id}", response=BenchmarkRunDetailOut)
def get_benchmark(request: HttpRequest, job_id: int) -> Any:
    """One run with the levels finished so far (a running sweep grows level by level)."""
    return run_payload(run_or_404(job_id))


# The 200 answer is JSON or, with format=csv, CSV: the schema names both.
CSV_EXPORT = {"responses": {200: {"description": "JSON (format=json) or CSV (format=csv, one row per level)",
                                  "content": {"text/csv": {"schema": {"type": "string"}}}}}}


@router.get("/benchmarks/{int:job_id}/export", response={200: dict[str, Any]}, openapi_extra=CSV_EXPORT)
def export_benchmark(request: HttpRequest, job_id: int, format: Literal["json", "csv"] = "json") -> Any:
    """`vllm bench serve`-style JSON (mean_ttft_ms, p99_itl_ms, output_throughput, ...) or
    CSV (one row per level)."""
    run = run_or_404(job_id)
    if format == "csv":
        return csv_response(export_rows(run), filename=f"benchmark-{job_id}.csv")
    return export_json(run)


"""Benchmark pages: the run list with the start form (admins), one run live (progress,
levels, charts), two runs compared, and the exports."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import redirect, render
from django.utils import timezone
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from benchmarks.params import CACHE_MODES, TARGETS
from benchmarks.selectors import compare_runs, export_json, export_rows, run_list, run_or_404, run_payload
from benchmarks.services import benchmark_start_named
from benchmarks.stats import SUMMARY_COLUMNS, SUMMARY_LABELS
from core.responses import csv_response
from core.roles import Capability, role_required, user_can
from lanes.models import Lane, LaneState

NUMBER_FIELDS = ("prompt_tokens", "output_tokens", "warmup", "requests_per_level", "duration_s", "timeout_s",
                 "idle_timeout_s", "slo_ttft_ms", "slo_tpot_ms", "slice_s")
LIST_FIELDS = {"concurrency": int, "request_rates": float}
# A replay sends the window's requests on their own schedule: the sweep's fields are left out.
SWEEP_FIELDS = ("concurrency", "request_rates", "requests_per_level", "duration_s")


def _form_moment(text: str) -> str | None:
    """A datetime-local value (the portal's time zone) or an ISO 8601 date-time with its own."""
    try:
        moment = datetime.fromisoformat(text.strip())
    except ValueError:
        return None
    if timezone.is_naive(moment):
        moment = timezone.make_aware(moment, timezone.get_current_timezone())
    return moment.isoformat()


def _form_replay(data: Any, params: dict[str, Any], errors: dict[str, str]) -> None:
    """The replay box: a request-log window (from, to, the lane that served it, the speed)
    instead of a sweep; the service checks the rest (benchmarks.params)."""
    since_text, until_text = (data.get("replay_since") or "").strip(), (data.get("replay_until") or "").strip()
    if not since_text and not until_text:
        return
    replay: dict[str, Any] = {"since": _form_moment(since_text), "until": _form_moment(until_text)}
    for name, moment, text in (("from", replay["since"], since_text), ("to", replay["until"], until_text)):
        if moment is None:
            errors["replay"] = f"{name} must be a date and time ({'empty' if not text else repr(text[:40])})"
            return
    lane = (data.get("replay_lane") or "").strip()
    if lane:
        replay["lane"] = lane
    speed = (data.get("replay_speed") or "").strip()
    try:
        replay["speed"] = float(speed) if speed else 1.0
    except ValueError:
        errors["replay"] = "speed must be a number"
        return
    for name in SWEEP_FIELDS:
        params.pop(name, None)
    params["replay"] = replay


def _form_params(data: Any) -> tuple[dict[str, Any], dict[str, str]]:
    """The form's text fields as typed parameters; what cannot be read is an error on its field."""
    params: dict[str, Any] = {}
    errors: dict[str, str] = {}
    for name, kind in LIST_FIELDS.items():
        text = (data.get(name) or "").strip()
        if not text:
            continue
        try:
            params[name] = [kind(part) for part in text.replace(" ", ",").split(",") if part]
        except ValueError:
            errors[name] = "must be numbers separated by commas"
    for name in NUMBER_FIELDS:
        text = (data.get(name) or "").strip()
        if not text:
            continue
        try:
            number = float(text)
            params[name] = int(number) if number.is_integer() else number
        except ValueError:
            errors[name] = "must be a number"
    params["targets"] = [target for target in TARGETS if data.get(f"target_{target}")] or None
    params["cache_mode"] = data.get("cache_mode") or None
    params["label"] = (data.get("label") or "").strip() or None
    _form_replay(data, params, errors)
    return params, errors


def _list_context(request: HttpRequest, errors: dict[str, str] | None = None) -> dict[str, Any]:
    lanes = list(Lane.objects.order_by("name"))
    return {
        "runs": run_list()[:200], "lanes": lanes,
        # A sweep of a lane that does not serve only fails: the form offers a serving one first.
        "first_serving": next((lane.name for lane in lanes if lane.observed_state == LaneState.SERVING), None),
        "can_operate": user_can(request.user, Capability.OPERATE), "errors": errors or {},
        "form": request.POST if request.method == "POST" else {}, "cache_modes": CACHE_MODES, "targets": TARGETS,
        "time_zone": timezone.get_current_timezone_name(),
    }


@role_required(Capability.VIEW)
def run_list_page(request: HttpRequest) -> HttpResponse:
    return render(request, "benchmarks/run_list.html", _list_context(request))


@require_POST
@role_required(Capability.OPERATE)
def run_start(request: HttpRequest) -> HttpResponse:
    params, errors = _form_params(request.POST)
    if not errors:
        try:
            job = benchmark_start_named(lane_name=request.POST.get("lane", ""), user=request.user, params=params)
            return redirect("benchmarks:run", job_id=job.pk)
        except ValidationError as exc:
            errors = {field: " ".join(messages) for field, messages in exc.message_dict.items()}
    return render(request, "benchmarks/run_list.html", _list_context(request, errors), status=400)


@never_cache  # the back button must not show a stale run that no event will ever update
@role_required(Capability.VIEW)
def run_page(request: HttpRequest, job_id: int) -> HttpResponse:
    run = run_or_404(job_id)
    return render(request, "benchmarks/run.html", {
        "run": run, "job": run.job, "payload": run_payload(run), "columns": [(name, unit, SUMMARY_LABELS[name]) for name, unit in SUMMARY_COLUMNS],
        "can_operate": user_can(request.user, Capability.OPERATE),
    })


@role_required(Capability.VIEW)
def compare_page(request: HttpRequest) -> HttpResponse:
    try:
        first, second = int(request.GET.get("a", "")), int(request.GET.get("b", ""))
    except ValueError:
        # No runs named (the page opened from the menu or a bare link): a picker, not a bare
        # 400; a value that is not a run number is bad input (400, naming a and b).
        given = "a" in request.GET or "b" in request.GET
        return render(request, "benchmarks/compare.html", {
            "error": "a and b must be run numbers." if given else "", "runs": run_list()[:50],
        }, status=400 if given else 200)
    a, b = run_or_404(first), run_or_404(second)
    return render(request, "benchmarks/compare.html", {
        "a": a, "b": b, "rows": compare_runs(a, b),
        "charts": {"a": run_payload(a), "b": run_payload(b)},
    })


@role_required(Capability.VIEW)
def export_json_view(request: HttpRequest, job_id: int) -> HttpResponse:  # noqa: ARG001 (a Django view)
    response = JsonResponse(export_json(run_or_404(job_id)), json_dumps_params={"indent": 2})
    response["Content-Disposition"] = f'attachment; filename="benchmark-{job_id}.json"'
    return response


@role_required(Capability.VIEW)
def export_csv_view(request: HttpRequest, job_id: int) -> HttpResponse:  # noqa: ARG001 (a Django view)
    return csv_response(export_rows(run_or_404(job_id)), filename=f"benchmark-{job_id}.csv")

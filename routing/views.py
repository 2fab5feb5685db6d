"""Team-lead pages (/routing/): prototypes, playground, versions, evaluation, shadow.
Everyone with the portal's read capability reads; only EDIT_ROUTING changes anything."""

from __future__ import annotations

import csv
import io
from typing import Any

from django.contrib import messages
from django.core.exceptions import ValidationError
from django.http import Http404, HttpRequest, HttpResponse, StreamingHttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.views.decorators.http import require_POST

from core.responses import csv_response
from core.roles import Capability, require, role_required
from lanes.selectors import lane_list, lane_named
from routing.decision import decide
from routing.encoder import EncoderUnavailable
from routing.engine import router_encoder, router_unavailable_reason
from routing.evaluation_runs import evaluation_payload, latest_evaluation, router_evaluation_request, stored_report
from routing.forms import ImportForm, PlaygroundForm, PrototypeForm, VersionForm, label_lanes_text
from routing.imports import FORMATS, LabelledText, render_labelled
from routing.learned import LearnedHead
from routing.models import EvaluationState, Prototype, RouterVersion, VersionStatus
from routing.playground import lane_target, stream_answer
from routing.published import version_snapshot
from routing.selectors import (
    eval_prompt_list,
    prototype_labels,
    prototype_list,
    published_version,
    shadow_version,
    version_changes,
    version_list,
    version_or_404,
)
from routing.services import (
    eval_prompts_import,
    previous_active_version,
    prototype_create,
    prototype_delete,
    prototype_update,
    prototypes_import,
    router_version_create_draft,
    router_version_publish,
    router_version_revert,
    router_version_train_request,
    router_version_update,
)


def _form_errors(request: HttpRequest, form: PrototypeForm | VersionForm, exc: ValidationError) -> None:
    for field, errors in exc.message_dict.items():
        for error in errors:
            if field in form.fields:
                form.add_error(field, error)
            else:  # e.g. the version's status: shown above the page
                messages.error(request, error)


@role_required(Capability.VIEW)
def prototypes_page(request: HttpRequest) -> HttpResponse:
    form = PrototypeForm(request.POST or None)
    if request.method == "POST":
        require(request.user, Capability.EDIT_ROUTING)
        if form.is_valid():
            try:
                prototype_create(actor=request.user, **form.cleaned_data)
            except ValidationError as exc:
                _form_errors(request, form, exc)
            else:
                messages.success(request, "Prototype added. Drafts use it now; the gateway after the next publish.")
                return redirect("routing:router-prototypes")
    search, label, enabled = request.GET.get("q", ""), request.GET.get("label", ""), request.GET.get("enabled", "")
    return render(request, "routing/prototypes.html", {
        "tab": "prototypes", "form": form, "import_form": ImportForm(), "rows": prototype_list(search=search, label=label, enabled=enabled),
        "labels": prototype_labels(), "q": search, "label": label, "enabled": enabled, "formats": FORMATS,
        "unavailable": router_unavailable_reason(),
    })


@role_required(Capability.EDIT_ROUTING)
def prototype_edit(request: HttpRequest, prototype_id: int) -> HttpResponse:
    prototype = get_object_or_404(Prototype, pk=prototype_id)
    initial = {"text": prototype.text, "label": prototype.label, "enabled": prototype.enabled}
    form = PrototypeForm(request.POST or None, initial=initial)
    if request.method == "POST" and form.is_valid():
        try:
            prototype_update(actor=request.user, prototype=prototype, **form.cleaned_data)
        except ValidationError as exc:
            _form_errors(request, form, exc)
        else:
            return redirect("routing:router-prototypes")
    return render(request, "routing/prototype_edit.html", {"tab": "prototypes", "form": form, "prototype": prototype})


@require_POST
@role_required(Capability.EDIT_ROUTING)
def prototype_remove(request: HttpRequest, prototype_id: int) -> HttpResponse:
    prototype_delete(actor=request.user, prototype=get_object_or_404(Prototype, pk=prototype_id))
    return redirect("routing:router-prototypes")


def _import(request: HttpRequest, what: str) -> HttpResponse:
    form = ImportForm(request.POST, request.FILES)
    target = "routing:router-prototypes" if what == "prototypes" else "routing:router-eval"
    if not form.is_valid():
        messages.error(request, "Import: choose a file and its format (CSV or JSON).")
        return redirect(target)
    try:
        content = form.cleaned_data["file"].read().decode("utf-8")
    except UnicodeDecodeError:
        messages.error(request, "Import refused, nothing changed: the file is not UTF-8 text.")
        return redirect(target)
    run = prototypes_import if what == "prototypes" else eval_prompts_import
    try:
        added, skipped = run(actor=request.user, content=content, fmt=form.cleaned_data["format"])
    except ValidationError as exc:
        messages.error(request, f"Import refused, nothing changed: {'; '.join(exc.messages)}")
    else:
        messages.success(request, f"Imported {added}; {skipped} were already there.")
    return redirect(target)


@require_POST
@role_required(Capability.EDIT_ROUTING)
def prototypes_import_view(request: HttpRequest) -> HttpResponse:
    return _import(request, "prototypes")


@require_POST
@role_required(Capability.EDIT_ROUTING)
def eval_import_view(request: HttpRequest) -> HttpResponse:
    return _import(request, "eval")


@role_required(Capability.VIEW)
def prototypes_export(request: HttpRequest) -> HttpResponse:
    fmt = request.GET.get("format", "csv")
    if fmt not in FORMATS:
        raise Http404("format must be csv or json")
    rows = [LabelledText(p.text, p.label, p.enabled) for p in prototype_list()]
    if fmt == "csv":
        # routing.imports lays the file out as its importer reads it back; the download is
        # every CSV export's (core.responses).
        return csv_response(csv.reader(io.StringIO(render_labelled(rows, "csv"))), filename="prototypes.csv")
    response = HttpResponse(render_labelled(rows, fmt), content_type="application/json")
    response["Content-Disposition"] = 'attachment; filename="prototypes.json"'
    return response


@role_required(Capability.VIEW)
def eval_page(request: HttpRequest) -> HttpResponse:
    return render(request, "routing/eval_prompts.html", {
        "tab": "eval", "rows": eval_prompt_list(), "import_form": ImportForm()})


@role_required(Capability.VIEW)
def playground(request: HttpRequest) -> HttpResponse:
    versions = [(str(v.number), f"v{v.number} ({v.status})") for v in version_list()]
    current = published_version()
    form = PlaygroundForm(request.POST or None, versions=versions,
                          initial={"version": str(current.number) if current else ""})
    result, unavailable = None, router_unavailable_reason()
    if request.method == "POST" and form.is_valid() and unavailable is None and versions:
        version = version_or_404(int(form.cleaned_data["version"] or versions[0][0]))
        encoder = router_encoder()
        snapshot = version_snapshot(version, encoder)
        query = encoder.embed([form.cleaned_data["prompt"]])[0]
        result = {"version": version, "decision": decide(query, snapshot.prototypes, snapshot.config, usable=lambda _lane: True),
                  "tokens": encoder.token_count(form.cleaned_data["prompt"]), "threshold": snapshot.config.threshold}
    return render(request, "routing/playground.html", {
        "tab": "playground", "form": form, "result": result, "unavailable": unavailable,
        "lanes": list(lane_list().values_list("name", flat=True))})


@require_POST
@role_required(Capability.EDIT_ROUTING)
def playground_send(request: HttpRequest) -> HttpResponse | StreamingHttpResponse:
    """Sends the prompt to the chosen lane and streams the answer back as text."""
    prompt = request.POST.get("prompt", "").strip()
    lane = lane_named(request.POST.get("lane", ""))
    if not prompt or lane is None:
        return HttpResponse("prompt: write a prompt; lane: choose an existing lane.", status=400,
                            content_type="text/plain; charset=utf-8")
    try:
        base_url, model = lane_target(lane)
    except IndexError:
        return HttpResponse(f"The lane {lane.name} has no node.", status=409, content_type="text/plain; charset=utf-8")
    return StreamingHttpResponse(stream_answer(base_url=base_url, model=model, prompt=prompt),
                                 content_type="text/plain; charset=utf-8", headers={"x-spark-lane": lane.name})


@role_required(Capability.VIEW)
def versions_page(request: HttpRequest) -> HttpResponse:
    if request.method == "POST":
        require(request.user, Capability.EDIT_ROUTING)
        source = published_version()
        if request.POST.get("source"):
            source = version_or_404(request.POST["source"])
        draft = router_version_create_draft(actor=request.user, source=source)
        return redirect("routing:router-version", number=draft.number)
    return render(request, "routing/versions.html", {
        "tab": "versions", "versions": version_list(), "published": published_version(), "shadow": shadow_version()})


@role_required(Capability.VIEW)
def version_page(request: HttpRequest, number: int) -> HttpResponse:
    version = version_or_404(number)
    initial = {"threshold": version.threshold, "aggregation": version.aggregation, "top_k": version.top_k,
               "probability_floor": version.probability_floor,
               "label_lanes": label_lanes_text(version.label_lanes), "default_lane": version.default_lane,
               "note": version.note}
    form = VersionForm(request.POST or None, initial=initial)
    if request.method == "POST":
        require(request.user, Capability.EDIT_ROUTING)
        if form.is_valid():
            try:
                router_version_update(actor=request.user, version=version, data=form.cleaned_data)
            except ValidationError as exc:
                _form_errors(request, form, exc)
            else:
                messages.success(request, f"v{version.number} saved.")
                return redirect("routing:router-version", number=number)
    published = published_version()
    return render(request, "routing/version.html", {
        "tab": "versions", "version": version, "form": form, "published": published,
        "changes": version_changes(version, published) if version != published else None,
        "editable": version.status == VersionStatus.DRAFT, "head": _head_status(version)})


def _head_status(version: RouterVersion) -> dict[str, object] | None:
    """The learned head as the page shows it: trained when, its figures, current or stale."""
    if not version.learned:
        return None
    head = LearnedHead.from_json(version.learned)
    try:
        snapshot = version_snapshot(version, router_encoder())
    except EncoderUnavailable:
        return {"head": head, "current": False}
    return {"head": head, "current": snapshot.prototypes.head is not None}


@require_POST
@role_required(Capability.EDIT_ROUTING)
def version_train(request: HttpRequest, number: int) -> HttpResponse:
    version = version_or_404(number)
    try:
        router_version_train_request(actor=request.user, version=version)
    except ValidationError as exc:
        messages.error(request, "; ".join(exc.messages))
    else:
        messages.success(request, f"Training v{version.number}'s learned decision in a worker: reload in a few seconds.")
    return redirect("routing:router-version", number=number)


@role_required(Capability.VIEW)
def version_evaluate(request: HttpRequest, number: int) -> HttpResponse:
    """The version's last stored evaluation (run in a worker: version_evaluate_run), with the
    progress of the one running now, followed live by the page (routing.consumers)."""
    version = version_or_404(number)
    try:
        target = float(request.GET.get("share", "0.34"))
    except ValueError:
        target = -1.0
    if not 0 <= target <= 1:
        messages.error(request, "share: give the lane's target share as a number from 0 to 1 (e.g. 0.34).")
        target = 0.34
    shown = version.evaluations.filter(state=EvaluationState.DONE).order_by("-created_at", "-id").first()
    context: dict[str, Any] = {"tab": "versions", "version": version, "shown": shown,
                               "progress": evaluation_payload(latest_evaluation(version), number)}
    if shown is not None:
        report = stored_report(shown, share_lane=request.GET.get("lane", ""), share_target=target)
        beside = report.beside
        context["chart"] = {
            "thresholds": [p.threshold for p in report.evaluation.sweep],
            "accuracy": [round(p.accuracy, 4) for p in report.evaluation.sweep],
            "shares": {lane: [round(p.shares.get(lane, 0.0), 4) for p in report.evaluation.sweep] for lane in report.evaluation.lanes},
            "published": ({"number": beside.number, "accuracy": [round(p.accuracy, 4) for p in beside.evaluation.sweep],
                           "threshold": beside.threshold} if beside else None),
            "threshold": version.threshold,
        }
        context.update(report=report, beside=beside, confusion=[
            (lane, list(row)) for lane, row in zip(report.evaluation.lanes, report.evaluation.confusion, strict=True)])
    return render(request, "routing/evaluate.html", context)


@require_POST
@role_required(Capability.EDIT_ROUTING)
def version_evaluate_run(request: HttpRequest, number: int) -> HttpResponse:
    """Start the version's evaluation in a worker; while one runs, a second click starts none."""
    version = version_or_404(number)
    evaluation, created = router_evaluation_request(actor=request.user, version=version)
    if not created:
        messages.info(request, f"v{number}'s evaluation #{evaluation.pk} is already {evaluation.state}: "
                               "its progress is shown below; no second one was started.")
    return redirect("routing:router-evaluate", number=number)


@role_required(Capability.VIEW)
def version_publish(request: HttpRequest, number: int) -> HttpResponse:
    """GET: the confirmation (what changes); POST: publish, or roll back to a retired version."""
    version = version_or_404(number)
    published = published_version()
    if request.method == "POST":
        require(request.user, Capability.EDIT_ROUTING)
        try:
            router_version_publish(actor=request.user, version=version)
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
            return redirect("routing:router-version", number=number)
        messages.success(request, f"v{version.number} is published: every gateway routes with it within a second.")
        return redirect("routing:router-versions")
    return render(request, "routing/publish.html", {
        "tab": "versions", "version": version, "published": published,
        "changes": version_changes(version, published), "rollback": version.status == VersionStatus.RETIRED})


@role_required(Capability.VIEW)
def version_revert(request: HttpRequest) -> HttpResponse:
    """GET: what a revert changes; POST: restore the previously active version."""
    published, previous = published_version(), previous_active_version()
    if request.method == "POST":
        require(request.user, Capability.EDIT_ROUTING)
        try:
            restored = router_version_revert(actor=request.user)
        except ValidationError as exc:
            messages.error(request, "; ".join(exc.messages))
            return redirect("routing:router-versions")
        messages.success(request, f"Reverted to v{restored.number}: every gateway routes with it within a second.")
        return redirect("routing:router-versions")
    return render(request, "routing/revert.html", {
        "tab": "versions", "published": published, "previous": previous,
        "changes": version_changes(previous, published) if previous is not None else None})

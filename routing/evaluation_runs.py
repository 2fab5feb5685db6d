"""A version's evaluation as background work: asked for from the page (a team lead or an
admin), run by a Celery worker (routing.tasks), its progress broadcast to the evaluation
page's socket as it goes (routing.consumers), its report stored on the RouterEvaluation row
and shown from there. The first evaluation embeds every evaluation prompt and prototype
(30-50 s under load); later ones read the stored embeddings and take a second or two.

One active evaluation per version: a second click while one is queued or running shows that
one (a partial unique index makes it so whichever process asks)."""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from typing import Any

from celery import current_app as celery_app
from django.contrib.auth.models import User
from django.db import IntegrityError, transaction
from django.utils import timezone

from core.audit import audit_record
from core.broadcast import broadcast
from core.roles import UserLike
from routing.decision import Baseline, Evaluation, ThresholdPoint, best_threshold, threshold_for_share
from routing.encoder import EncoderUnavailable
from routing.engine import router_encoder, stored_embeddings
from routing.evaluation import EvaluationReport, RuleScore, evaluate_version
from routing.models import EvaluationState, RouterEvaluation, RouterVersion
from routing.selectors import eval_prompt_list, published_version, version_prototypes

log = logging.getLogger(__name__)

EVALUATE_TASK = "routing.tasks.evaluate_router_version"
ACTIVE = (EvaluationState.QUEUED, EvaluationState.RUNNING)
PROGRESS_EVENT = "evaluation.progress"
# An evaluation queued or running this long is lost (its worker died): asking again starts one.
LOST_AFTER_S = 600


def evaluation_group(number: int) -> str:
    """The evaluation page's socket group, per version number."""
    return f"routing.evaluation.{number}"


def evaluation_payload(evaluation: RouterEvaluation | None, number: int) -> dict[str, Any]:
    """What the page shows of the latest evaluation (none yet: state "none")."""
    if evaluation is None:
        return {"id": 0, "version": number, "state": "none", "stage": "", "done": 0, "total": 0, "error": ""}
    return {"id": evaluation.pk, "version": number, "state": evaluation.state, "stage": evaluation.stage,
            "done": evaluation.done, "total": evaluation.total, "error": evaluation.error,
            "finished_at": evaluation.finished_at.isoformat() if evaluation.finished_at else None}


def latest_evaluation(version: RouterVersion) -> RouterEvaluation | None:
    return version.evaluations.order_by("-created_at", "-id").first()


def evaluation_current(number: int) -> list[tuple[str, Any]]:
    """The socket's snapshot on (re)connect: the version's latest evaluation as it is now."""
    version = RouterVersion.objects.filter(number=number).first()
    return [(PROGRESS_EVENT, evaluation_payload(latest_evaluation(version) if version else None, number))]


def _publish(evaluation: RouterEvaluation) -> None:
    number = evaluation.version.number
    payload = evaluation_payload(evaluation, number)
    transaction.on_commit(lambda: broadcast(evaluation_group(number), PROGRESS_EVENT, payload))


def dispatch_evaluation(evaluation_id: int) -> None:
    """Queue the worker's task (on commit); a broker that is down fails the row, saying so."""
    try:
        celery_app.send_task(EVALUATE_TASK, args=(evaluation_id,))
    except Exception as exc:
        log.exception("router evaluation %s could not be queued", evaluation_id)
        _finish(evaluation_id, EvaluationState.FAILED, error=f"could not be queued (is Redis up?): {type(exc).__name__}")


def router_evaluation_request(*, actor: UserLike | None, version: RouterVersion) -> tuple[RouterEvaluation, bool]:
    """(the evaluation, whether it is new): the version's active one if it has one."""
    with transaction.atomic():
        RouterVersion.objects.select_for_update().filter(pk=version.pk).first()
        active = version.evaluations.filter(state__in=ACTIVE).first()
        if active is not None and active.created_at < timezone.now() - timedelta(seconds=LOST_AFTER_S):
            _finish(active.pk, EvaluationState.FAILED, error=f"lost: no worker finished it in {LOST_AFTER_S // 60} minutes")
            active = None
        if active is not None:
            return active, False
        try:
            with transaction.atomic():
                evaluation = RouterEvaluation.objects.create(
                    version=version, created_by=actor if isinstance(actor, User) else None,
                    stage="queued: waiting for a worker")
        except IntegrityError:  # another process asked at the same moment
            return version.evaluations.filter(state__in=ACTIVE).get(), False
        audit_record(actor=actor, action="router.evaluate", obj=version,
                     after={"version": version.number, "evaluation": evaluation.pk})
        _publish(evaluation)
        transaction.on_commit(lambda: dispatch_evaluation(evaluation.pk))
    return evaluation, True


def _update(evaluation: RouterEvaluation, **fields: Any) -> None:
    for name, value in fields.items():
        setattr(evaluation, name, value)
    RouterEvaluation.objects.filter(pk=evaluation.pk).update(**fields)
    _publish(evaluation)


def _finish(evaluation_id: int, state: str, *, result: dict[str, Any] | None = None, error: str = "") -> None:
    evaluation = RouterEvaluation.objects.select_related("version").get(pk=evaluation_id)
    stage = "done" if state == EvaluationState.DONE else "failed"
    _update(evaluation, state=state, stage=stage, result=result, error=error[:300], finished_at=timezone.now())


def router_evaluation_run(*, evaluation_id: int) -> None:
    """The worker's task: embed what is not embedded yet (the progress the page shows),
    then score the version beside the published one and store the report."""
    evaluation = RouterEvaluation.objects.select_related("version").get(pk=evaluation_id)
    if evaluation.state != EvaluationState.QUEUED:
        return  # a redelivered task: that run is already under way or over
    _update(evaluation, state=EvaluationState.RUNNING, stage="loading the encoder")
    try:
        encoder = router_encoder()
        published = published_version()
        texts = [p.text for p in eval_prompt_list()] + [i["text"] for i in version_prototypes(evaluation.version)]
        if published is not None:
            texts += [i["text"] for i in version_prototypes(published)]

        def progress(done: int, total: int) -> None:
            _update(evaluation, stage="embedding the prompts and prototypes", done=done, total=total)

        stored_embeddings(encoder, list(dict.fromkeys(texts)), on_progress=progress)
        _update(evaluation, stage="scoring")
        report = evaluate_version(evaluation.version)
        beside = evaluate_version(published) if published is not None and published != evaluation.version else None
    except EncoderUnavailable as exc:
        _finish(evaluation_id, EvaluationState.FAILED, error=str(exc))
        return
    except Exception as exc:
        _finish(evaluation_id, EvaluationState.FAILED, error=f"evaluation failed: {type(exc).__name__}: {exc}")
        raise
    _finish(evaluation_id, EvaluationState.DONE, result=report_to_json(report, beside))


# --- the stored report ---------------------------------------------------------------------

@dataclass(frozen=True)
class HeadScores:
    cv_accuracy: float
    train_accuracy: float


@dataclass(frozen=True)
class Beside:
    """The published version's figures, as they were when the evaluation ran."""

    number: int
    threshold: float
    evaluation: Evaluation


@dataclass(frozen=True)
class StoredReport:
    """What the evaluation page shows (the fields EvaluationReport has), read back from a
    stored evaluation; the calibration is recomputed from the stored sweep for the lane and
    share the page asks for."""

    evaluation: Evaluation
    baselines: tuple[Baseline, ...]
    best: ThresholdPoint | None
    calibrated: ThresholdPoint | None
    share_lane: str
    share_target: float
    rules: tuple[RuleScore, ...]
    head: HeadScores | None
    head_stale: bool
    beside: Beside | None
    evaluated_at: datetime | None


def _plain(value: Any) -> Any:
    """numpy scalars (scores, accuracies) as Python numbers, for JSON."""
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, str):
        return value.item()
    return value


def report_to_json(report: EvaluationReport, beside: EvaluationReport | None) -> dict[str, Any]:
    return _plain({
        "evaluation": asdict(report.evaluation), "baselines": [asdict(b) for b in report.baselines],
        "rules": [asdict(r) for r in report.rules], "share_lane": report.share_lane,
        "head": ({"cv_accuracy": report.head.cv_accuracy, "train_accuracy": report.head.train_accuracy}
                 if report.head is not None else None),
        "head_stale": report.head_stale,
        "beside": ({"number": beside.version.number, "threshold": beside.version.threshold,
                    "evaluation": {**asdict(beside.evaluation), "mistakes": []}} if beside is not None else None),
    })


def _evaluation(data: Mapping[str, Any]) -> Evaluation:
    return Evaluation(
        count=int(data["count"]), accuracy=float(data["accuracy"]), lanes=tuple(data["lanes"]),
        confusion=tuple(tuple(row) for row in data["confusion"]), shares=dict(data["shares"]),
        sweep=tuple(ThresholdPoint(**point) for point in data["sweep"]),
        mistakes=tuple((m[0], m[1], m[2], m[3], float(m[4])) for m in data["mistakes"]))


def stored_report(evaluation: RouterEvaluation, *, share_lane: str = "", share_target: float = 0.34) -> StoredReport:
    data = evaluation.result or {}
    scored = _evaluation(data["evaluation"])
    lane = share_lane if share_lane in scored.lanes else data.get("share_lane", "")
    beside = data.get("beside")
    head = data.get("head")
    return StoredReport(
        evaluation=scored, baselines=tuple(Baseline(**b) for b in data["baselines"]), best=best_threshold(scored),
        calibrated=threshold_for_share(scored, lane, share_target) if lane else None, share_lane=lane,
        share_target=share_target, rules=tuple(RuleScore(**r) for r in data["rules"]),
        head=HeadScores(**head) if head else None, head_stale=bool(data.get("head_stale")),
        beside=(Beside(int(beside["number"]), float(beside["threshold"]), _evaluation(beside["evaluation"]))
                if beside else None),
        evaluated_at=evaluation.finished_at)

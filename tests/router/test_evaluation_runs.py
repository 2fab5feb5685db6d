"""A version's evaluation runs as background work (the issue: the first one blocked a page
for 30-50 s): a team lead or an admin starts it, a viewer may not; a second click while one
runs starts none; a real Celery worker runs it, reporting its progress, and stores the report
the page then shows. The page following it live: tests/e2e/test_router_evaluation_live.py."""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from channels.layers import get_channel_layer

from core.models import AuditEvent
from routing.evaluation_runs import PROGRESS_EVENT, evaluation_group
from routing.models import EvaluationState, RouterEvaluation, RouterVersion
from routing.services import router_version_create_draft
from routing.tasks import evaluate_router_version
from tests.conftest import wait_for
from tests.jobs.test_celery_worker import Worker
from tests.router.conftest import evaluate_now


@pytest.fixture
def draft(starter: list[str], admin_user: Any) -> RouterVersion:
    return router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))


@pytest.mark.django_db
def test_a_viewer_may_read_the_evaluation_but_not_start_one(draft, viewer_client):
    page = viewer_client.get(f"/routing/versions/{draft.number}/evaluate").content.decode()
    assert "Not evaluated yet." in page and 'id="evaluate-run"' not in page
    response = viewer_client.post(f"/routing/versions/{draft.number}/evaluate/run")
    assert response.status_code == 403
    assert not RouterEvaluation.objects.exists()


@pytest.mark.django_db
def test_a_team_lead_starts_one_and_a_second_click_while_it_runs_starts_none(draft, lead_client):
    page = lead_client.get(f"/routing/versions/{draft.number}/evaluate").content.decode()
    assert 'id="evaluate-run"' in page
    first = lead_client.post(f"/routing/versions/{draft.number}/evaluate/run")
    assert first.status_code == 302
    evaluation = RouterEvaluation.objects.get()
    assert evaluation.state == EvaluationState.QUEUED and evaluation.version == draft
    assert AuditEvent.objects.filter(action="router.evaluate").count() == 1  # as training is audited
    again = lead_client.post(f"/routing/versions/{draft.number}/evaluate/run", follow=True)
    assert RouterEvaluation.objects.count() == 1
    assert AuditEvent.objects.filter(action="router.evaluate").count() == 1
    assert f"evaluation #{evaluation.pk} is already queued" in again.content.decode()
    page = again.content.decode()
    assert 'data-state="queued"' in page and 'id="evaluate-run" disabled' in page


@pytest.mark.django_db
def test_the_page_shows_the_stored_report_and_recalibrates_it_without_running_again(draft, lead_user, viewer_client):
    evaluation = evaluate_now(draft, lead_user)
    assert evaluation.state == EvaluationState.DONE and evaluation.total == evaluation.done
    response = viewer_client.get(f"/routing/versions/{draft.number}/evaluate?lane=qwen&share=0.5")
    report = response.context["report"]
    assert report.evaluation.accuracy >= 0.9 and report.share_lane == "qwen"
    assert report.calibrated is not None and abs(report.calibrated.shares["qwen"] - 0.5) < 0.2
    assert RouterEvaluation.objects.count() == 1  # calibrating reads the stored sweep


@pytest.fixture
def worker(tmp_path: Path) -> Iterator[Worker]:
    w = Worker(f"router-eval-{uuid.uuid4().hex[:8]}", tmp_path / "worker.log")
    yield w
    w.stop()


@pytest.mark.django_db(transaction=True)
def test_a_celery_worker_runs_it_reports_progress_and_stores_the_report(
    starter, admin_user, lead_client, worker, monkeypatch,
):
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    monkeypatch.setattr("routing.evaluation_runs.dispatch_evaluation",
                        lambda pk: evaluate_router_version.apply_async(args=(pk,), queue=worker.queue))
    seen: list[dict[str, Any]] = []
    listening = threading.Event()

    async def listen() -> None:  # the page's socket group, as a consumer reads it: one loop throughout
        layer = get_channel_layer()
        channel = await layer.new_channel()
        await layer.group_add(evaluation_group(draft.number), channel)
        listening.set()
        while not seen or seen[-1]["state"] not in ("done", "failed"):
            message = await asyncio.wait_for(layer.receive(channel), timeout=240)
            assert message["event"] == PROGRESS_EVENT
            seen.append(message["data"])

    listener = threading.Thread(target=lambda: asyncio.run(listen()), daemon=True)
    listener.start()
    assert listening.wait(10)
    assert lead_client.post(f"/routing/versions/{draft.number}/evaluate/run").status_code == 302
    evaluation = RouterEvaluation.objects.get()
    wait_for(lambda: RouterEvaluation.objects.get(pk=evaluation.pk).state in (EvaluationState.DONE, EvaluationState.FAILED),
             timeout=240, what="the worker to finish the evaluation")
    evaluation.refresh_from_db()
    assert evaluation.state == EvaluationState.DONE, evaluation.error + worker.log.read_text()[-3000:]
    assert evaluation.total > 300 and evaluation.done == evaluation.total  # every prompt and prototype embedded
    assert evaluation.result["evaluation"]["accuracy"] >= 0.9
    listener.join(timeout=30)
    stages = [m["stage"] for m in seen]
    assert "loading the encoder" in stages and "scoring" in stages and stages[-1] == "done"
    partial = [m for m in seen if m["stage"].startswith("embedding") and 0 < m["done"] < m["total"]]
    assert partial, "no progress between the first and the last batch"
    page = lead_client.get(f"/routing/versions/{draft.number}/evaluate").content.decode()
    assert 'id="accuracy"' in page and 'data-state="done"' in page

"""The dry run an admin reads on the lane page is byte for byte what the launch job runs:
the page, its confirmation dialog and the API show one rendering, and the commands the job
sends to the node are the plan's commands, in the plan's order."""

from __future__ import annotations

import html
import re
from typing import Any

import pytest

from jobs.models import JobKind, JobState, StepState
from jobs.runner import JobContext
from jobs.services import job_run, lane_job_create
from lanes.models import Node
from tests.jobs.conftest import call_in_thread

pytestmark = pytest.mark.django_db(transaction=True)


def shown_plans(page: str) -> tuple[str, str]:
    """(the lane page's launch plan, the Launch confirmation's plan), as the browser shows them."""
    lane_page = re.search(r'<pre [^>]*id="plan"[^>]*>(.*?)</pre>', page, re.S)
    confirmation = re.search(r'<pre [^>]*data-plan="launch"[^>]*>(.*?)</pre>', page, re.S)
    assert lane_page and confirmation
    return html.unescape(lane_page.group(1)), html.unescape(confirmation.group(1))


@pytest.fixture
def executed(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, str, str]]:
    """(node, command, stdin) of every command a job sends to a node; each still really runs."""
    sent: list[tuple[str, str, str]] = []
    real_run = JobContext.run

    def recording_run(self: JobContext, endpoint: Any, command: str, **kwargs: Any) -> Any:
        sent.append((endpoint.name, command, kwargs.get("stdin") or ""))
        return real_run(self, endpoint, command, **kwargs)

    monkeypatch.setattr(JobContext, "run", recording_run)
    return sent


def test_the_launch_runs_exactly_the_dry_run_shown_on_the_lane_page(
    local_cluster: Any, make_lane: Any, admin_user: Any, admin_client: Any, executed: list[tuple[str, str, str]]
) -> None:
    spark3 = local_cluster.node("spark3")
    # A node saved without a runtime command: the page and the job must both fall back to docker.
    Node.objects.filter(pk=spark3.pk).update(runtime_command="")
    lane = make_lane("qwen", [spark3])

    page_plan, confirmed_plan = shown_plans(admin_client.get("/lanes/qwen/").content.decode())
    api_plan = admin_client.get("/api/lanes/qwen/plan").json()
    assert page_plan == confirmed_plan == api_plan["text"]
    assert "docker image inspect" in page_plan

    job = lane_job_create(lane=lane, kind=JobKind.LAUNCH, user=admin_user)
    call_in_thread(lambda: job_run(job_id=job.pk))
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.error

    states = dict(job.steps.values_list("key", "state"))
    assert list(states) == [step["key"] for step in api_plan["steps"]]
    expected: list[tuple[str, str, str]] = []
    alive_checks = set()
    for step in api_plan["steps"]:
        if step["skip_if"]:
            expected.append((step["node"], step["skip_if"], ""))
        if states[step["key"]] == StepState.SKIPPED:
            continue
        if step["kind"] == "shell":
            expected.append((step["node"], step["command"], step["stdin"]))
        elif step["alive_check"]:
            alive_checks.add((step["node"], step["alive_check"], ""))  # run between polls, as often as needed
            alive_checks.update((node, step["guard_check"], "") for node in step["guard_nodes"])  # the memory guard
    assert [sent for sent in executed if sent not in alive_checks] == expected
    assert len(expected) >= len(api_plan["steps"])
    # The preflight's read of the node is its inventory now (the node page shows it).
    inventory = Node.objects.get(pk=spark3.pk).inventory
    assert [image["reference"] for image in inventory["images"]] == [lane.image]
    assert any(model["model_id"] == lane.model_id and model["complete"] for model in inventory["models"]), inventory

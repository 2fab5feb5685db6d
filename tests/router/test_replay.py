"""Replay: a draft decides offline on captured prompts beside the published version."""

from __future__ import annotations

import pytest

from gateway.models import CapturedPrompt, RequestOutcome
from gateway.services import api_key_create
from routing.evaluation import outcome_weighted_accuracy
from routing.models import RouterVersion
from routing.services import router_version_create_draft, router_version_update

DEEP = "Prove that there are infinitely many primes, step by step."
SHORT = "What port does PostgreSQL listen on by default?"


def test_outcome_weighted_accuracy_keeps_good_lanes_and_leaves_bad_ones():
    # kept a success (1), left a failure (1 - 0 = 1), kept a failure (0), left a success (1 - 1 = 0); one unrated
    assert outcome_weighted_accuracy(["a", "b", "a", "b", "a"], ["a", "a", "a", "a", "a"], [1.0, 0.0, 0.0, 1.0, None]) == (4, 0.5)
    assert outcome_weighted_accuracy(["a"], ["a"], [None]) == (0, None)


@pytest.fixture
def captured(starter, admin_user) -> None:
    key = api_key_create(actor=admin_user, name="agent", log_prompts=True).key
    for i, (text, lane, score) in enumerate([(DEEP, "deepseek", 0.0), (SHORT, "qwen", 1.0), (DEEP + " Twice.", "deepseek", None)]):
        CapturedPrompt.objects.create(key=key, request_id=f"req-{i}", text=text, lane=lane)
        if score is not None:
            RequestOutcome.objects.create(key=key, request_id=f"req-{i}", score=score)


def test_a_draft_is_replayed_on_the_captured_prompts(captured, admin_user, viewer_client):
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    lanes = dict(draft.label_lanes, long_reasoning="qwen")  # the draft sends reasoning to qwen
    router_version_update(actor=admin_user, version=draft, data={"label_lanes": lanes})
    response = viewer_client.get(f"/routing/replay/?version={draft.number}")
    assert response.status_code == 200
    report = response.context["report"]
    assert report.count == 3 and report.against.number == 1
    assert report.agreement == pytest.approx(1 / 3)  # only the short question stays where it was
    assert report.shares["qwen"] == 1.0
    # Rated: the deep prompt failed on deepseek and the draft moves it (1 - 0), the short one
    # succeeded on qwen and the draft keeps it (1): outcome-weighted accuracy 1.0 on 2.
    assert (report.rated, report.outcome_accuracy) == (2, 1.0)
    content = response.content.decode()
    assert 'id="replay-agreement">0.333<' in content and "Prove that there are infinitely many primes" in content


def test_the_replay_page_without_a_version_lists_the_drafts(captured, admin_user, viewer_client):
    draft = router_version_create_draft(actor=admin_user)
    content = viewer_client.get("/routing/replay/").content.decode()
    assert f'value="{draft.number}"' in content and 'id="replay-summary"' not in content

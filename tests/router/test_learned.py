"""The learned decision: a logistic head over the shipped encoder's embeddings, trained in
a worker job from a version's prototypes, stored with the version and its encoder id."""

from __future__ import annotations

import json

import numpy as np
import pytest
import redis
from django.conf import settings

from core.models import AuditEvent
from routing.decision import PrototypeSet, RouterConfig, decide, evaluate
from routing.engine import router_encoder
from routing.learned import LearnedHead, prototypes_sha
from routing.models import Prototype, RouterVersion, TrainState, VersionStatus
from routing.published import load_router_state, version_snapshot
from routing.services import (
    TRAIN_TASK,
    router_version_create_draft,
    router_version_publish,
    router_version_train,
    router_version_update,
)
from routing.tasks import train_router_version
from routing.training import TrainingRefused, train_head
from tests.router.conftest import evaluate_now

# By the nature of the task, as seed 000 splits it: one diff or one file is fast work (qwen);
# a review or a migration across many files or a whole codebase is long-file work (deepseek).
CASES = [
    ("Review this two-line diff that renames a variable.", "qwen"),
    ("Port this one function from urllib2 to urllib.request.", "qwen"),
    ("Review the 30 files of this PR, which moves our whole data access layer to the repository pattern.", "deepseek"),
    ("Migrate the entire monorepo, all 14 services, from Python 3.9 to 3.12 and fix every deprecation.", "deepseek"),
    ("What is the default port of Redis?", "qwen"),
    ("Prove that there are infinitely many primes, step by step.", "deepseek"),
]


def two_lane_head(floor: float) -> tuple[PrototypeSet, RouterConfig]:
    """Two orthogonal directions, one label each: a query's probability is set by its angle."""
    vectors = np.eye(2, dtype=np.float32)
    head = LearnedHead("enc", prototypes_sha(["a", "b"], ["fast", "deep"]), ("deep", "fast"),
                       np.array([[0.0, 4.0], [4.0, 0.0]], dtype=np.float32), np.zeros(2, dtype=np.float32), 1.0, 1.0)
    prototypes = PrototypeSet(("a", "b"), ("fast", "deep"), vectors, head=head)
    config = RouterConfig(0.2, "learned", 3, {"fast": "qwen", "deep": "deepseek"}, "qwen", probability_floor=floor)
    return prototypes, config


def test_below_the_probability_floor_the_default_lane_decides():
    prototypes, config = two_lane_head(floor=0.9)
    clear = decide(np.array([0.0, 1.0], dtype=np.float32), prototypes, config, usable=lambda _l: True)
    assert (clear.lane, clear.reason, clear.label) == ("deepseek", "router", "deep") and clear.score > 0.9
    unsure = np.array([0.6, 0.8], dtype=np.float32)  # deep wins, at p ≈ 0.69 < 0.9
    decision = decide(unsure, prototypes, config, usable=lambda _l: True)
    assert (decision.lane, decision.reason) == ("qwen", "default")
    assert decide(unsure, *two_lane_head(floor=0.5), usable=lambda _l: True).lane == "deepseek"
    # The evaluation applies the same rule: the floor is its threshold.
    result = evaluate(unsure[None, :], ["t"], ["deep"], prototypes, config)
    assert result.accuracy == 0.0 and result.shares["qwen"] == 1.0


def test_a_lane_the_caller_cannot_use_is_never_chosen_by_the_head():
    prototypes, config = two_lane_head(floor=0.5)
    decision = decide(np.array([0.0, 1.0], dtype=np.float32), prototypes, config, usable=lambda lane: lane != "deepseek")
    assert decision.lane == "qwen" and decision.reason == "default"


@pytest.mark.parametrize(("prompt", "lane"), CASES)
def test_the_starter_learned_decision_routes_fixed_prompts(starter, prompt, lane):
    state = load_router_state("test")
    assert state.published is not None and state.published.config.aggregation == "learned"
    assert state.published.prototypes.head is not None
    decision = decide(router_encoder().embed([prompt])[0], state.published.prototypes, state.published.config,
                      usable=lambda _name: True)
    assert decision.lane == lane, (decision.label, decision.score)


def test_the_head_is_stored_with_the_version_and_its_encoder_id(starter):
    version = RouterVersion.objects.get(status=VersionStatus.PUBLISHED)
    head = LearnedHead.from_json(version.learned)
    assert head.encoder == router_encoder().id
    assert "codebase_review" in head.classes and head.coef.shape == (len(head.classes), router_encoder().dim)
    assert 0.85 <= head.cv_accuracy <= head.train_accuracy <= 1.0


def test_retraining_unchanged_prototypes_changes_nothing(starter, admin_user):
    draft = router_version_create_draft(actor=admin_user)
    draft.learned = None
    draft.save()
    assert router_version_train(version_id=draft.pk) is True
    draft.refresh_from_db()
    first, trained_at = json.dumps(draft.learned), draft.learned_at
    assert router_version_train(version_id=draft.pk) is False  # same prototypes, same encoder: not rewritten
    draft.refresh_from_db()
    assert json.dumps(draft.learned) == first and draft.learned_at == trained_at
    # Trained again from nothing, the head is the same bit for bit (fixed random_state, fixed order).
    RouterVersion.objects.filter(pk=draft.pk).update(learned=None)
    assert router_version_train(version_id=draft.pk) is True
    draft.refresh_from_db()
    assert json.dumps(draft.learned) == first


def test_the_order_of_the_prototypes_does_not_change_the_head():
    rng = np.random.default_rng(7)
    vectors = rng.normal(size=(12, 8)).astype(np.float32)
    texts = [f"t{i}" for i in range(12)]
    labels = ["a"] * 4 + ["b"] * 4 + ["c"] * 4
    one = train_head(vectors, texts, labels, encoder="e", lane_for=str)
    order = rng.permutation(12)
    two = train_head(vectors[order], [texts[i] for i in order], [labels[i] for i in order], encoder="e", lane_for=str)
    assert one.to_json() == two.to_json()


def test_training_needs_two_labels_and_learns_a_label_with_one_prototype():
    with pytest.raises(TrainingRefused, match="at least two labels"):
        train_head(np.eye(3, dtype=np.float32), ["a", "b", "c"], ["x"] * 3, encoder="e", lane_for=str)
    vectors = np.eye(5, dtype=np.float32)
    head = train_head(vectors, list("abcde"), ["x", "x", "y", "y", "new"], encoder="e", lane_for=str)
    assert head.classes == ("new", "x", "y")  # learned, though it cannot be held out
    assert head.probabilities(vectors[4:5])[0].argmax() == 0


def test_a_changed_prototype_makes_the_head_stale_and_publishing_it_is_refused(starter, admin_user):
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    assert version_snapshot(draft, router_encoder()).prototypes.head is not None  # copied from v1, still current
    Prototype.objects.create(text="Review every file of the storage package together.", label="codebase_review")
    assert version_snapshot(draft, router_encoder()).prototypes.head is None  # stale: the similarity rule decides
    with pytest.raises(Exception, match="not trained on its current prototypes"):
        router_version_publish(actor=admin_user, version=draft)
    assert RouterVersion.objects.get(status=VersionStatus.PUBLISHED).number == 1
    router_version_train(version_id=draft.pk)
    draft.refresh_from_db()
    router_version_publish(actor=admin_user, version=draft)
    assert RouterVersion.objects.get(status=VersionStatus.PUBLISHED).number == draft.number


def test_the_train_button_queues_the_job_that_a_worker_runs(starter, admin_user, lead_client,
                                                            django_capture_on_commit_callbacks):
    draft = router_version_create_draft(actor=admin_user)
    RouterVersion.objects.filter(pk=draft.pk).update(learned=None)
    client = redis.Redis.from_url(settings.CELERY_BROKER_URL)
    queue = settings.CELERY_BROKER_TRANSPORT_OPTIONS.get("global_keyprefix", "") + settings.CELERY_TASK_DEFAULT_QUEUE
    client.delete(queue)
    with django_capture_on_commit_callbacks(execute=True):
        assert lead_client.post(f"/routing/versions/{draft.number}/train").status_code == 302
    draft.refresh_from_db()
    assert draft.train_state == TrainState.QUEUED
    messages = [json.loads(raw) for raw in client.lrange(queue, 0, -1)]
    assert [(m["headers"]["task"], m["headers"]["argsrepr"]) for m in messages] == [(TRAIN_TASK, f"({draft.pk},)")]
    client.delete(queue)
    train_router_version(draft.pk)  # what the worker runs for that message
    page = lead_client.get(f"/routing/versions/{draft.number}/").content.decode()
    assert 'id="train-state">trained<' in page and 'id="cv-accuracy"' in page
    assert AuditEvent.objects.filter(action="router.train").exists()


@pytest.mark.parametrize("role", ["viewer", "outsider"])
def test_only_a_team_lead_may_train(starter, admin_user, role_clients, role):
    draft = router_version_create_draft(actor=admin_user)
    assert role_clients[role].post(f"/routing/versions/{draft.number}/train").status_code == 403
    draft.refresh_from_db()
    assert draft.train_state == ""


def test_a_published_version_is_not_retrained(starter, lead_client):
    response = lead_client.post("/routing/versions/1/train", follow=True)
    assert "v1 is published: make a draft from it to train it." in response.content.decode()


def test_a_bad_probability_floor_is_refused_naming_the_field(starter, admin_user):
    draft = router_version_create_draft(actor=admin_user)
    with pytest.raises(Exception) as caught:
        router_version_update(actor=admin_user, version=draft, data={"probability_floor": 1.5})
    assert "probability_floor" in caught.value.message_dict  # type: ignore[attr-defined]


def test_the_evaluation_page_puts_both_rules_side_by_side_and_labels_in_sample_figures(starter, admin_user, viewer_client):
    draft = router_version_create_draft(actor=admin_user, source=RouterVersion.objects.get(number=1))
    evaluate_now(draft, admin_user)
    response = viewer_client.get(f"/routing/versions/{draft.number}/evaluate")
    content = response.content.decode()
    report = response.context["report"]
    assert [r.name.split(" ")[0] for r in report.rules] == ["learned", "similarity"]
    assert 'id="other-rule-accuracy"' in content and 'id="cv-accuracy"' in content
    assert "(in-sample)" in content and "tunes the threshold on this evaluation set" in content
    names = [b.name for b in report.baselines]
    assert any("characters" in n for n in names) and any("tokens" in n for n in names) and "keywords" in names
    # The learned head on the shipped evaluation set (never trained on it) beats every baseline.
    assert report.rules[0].accuracy >= 0.92
    assert report.rules[0].accuracy >= max(b.accuracy for b in report.baselines) + 0.1

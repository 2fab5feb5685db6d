"""Router models: prototypes and their embeddings, router versions, evaluation prompts."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models

LABEL_VALIDATOR = RegexValidator(r"^[a-z][a-z0-9_]{0,63}$", "A label is lower-case letters, digits and _ (e.g. long_reasoning).")


class Prototype(models.Model):
    """A hand-labelled example of a kind of request."""

    text = models.TextField()
    label = models.CharField(max_length=64, validators=[LABEL_VALIDATOR], db_index=True)
    enabled = models.BooleanField(default=True)
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["label", "id"]

    def __str__(self) -> str:
        return f"{self.label}: {self.text[:60]}"


class TextEmbedding(models.Model):
    """A prototype's (or evaluation prompt's) embedding, keyed by the text's hash and the
    encoder id: computed once per text and encoder, recomputed only when either changes,
    and shared by the live prototypes, every published snapshot and the evaluation set."""

    encoder = models.CharField(max_length=120)
    text_sha = models.CharField(max_length=64)
    vector = models.BinaryField()  # float32, L2-normalised

    class Meta:
        constraints = [models.UniqueConstraint(fields=["encoder", "text_sha"], name="embedding_encoder_text_unique")]

    def __str__(self) -> str:
        return f"{self.encoder} {self.text_sha[:10]}"


class Aggregation(models.TextChoices):
    MAX = "max", "max (best prototype of each label)"
    MEAN_TOP_K = "mean_top_k", "mean of the label's top-k prototypes"
    LEARNED = "learned", "learned (logistic regression over the embeddings)"


class TrainState(models.TextChoices):
    NONE = "", "not trained"
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class VersionStatus(models.TextChoices):
    DRAFT = "draft"
    PUBLISHED = "published"
    RETIRED = "retired"  # was published; rollback can publish it again


class StopMetric(models.TextChoices):
    NONE = "", "none (after N samples only)"
    AGREEMENT = "agreement", "agreement with the published version"
    WIN_RATE = "win_rate", "judged win rate of the draft"


class RouterVersion(models.Model):
    """The router's settings. A draft reads the enabled prototypes live; publishing freezes
    them into `prototypes` so the gateway's behaviour changes only by a publish."""

    number = models.PositiveIntegerField(unique=True)
    status = models.CharField(max_length=12, choices=VersionStatus.choices, default=VersionStatus.DRAFT)
    note = models.CharField(max_length=200, blank=True)
    threshold = models.FloatField(default=0.72)  # seed 000's threshold, for bge-small
    aggregation = models.CharField(max_length=12, choices=Aggregation.choices, default=Aggregation.MAX)
    top_k = models.PositiveSmallIntegerField(default=3)
    label_lanes = models.JSONField(default=dict, blank=True)  # {label: lane name}
    default_lane = models.CharField(max_length=63, blank=True)
    prototypes = models.JSONField(null=True, blank=True)  # frozen [{"text", "label"}] once published
    # The learned aggregation: below this probability for the best lane, the default lane.
    probability_floor = models.FloatField(default=0.5)
    learned = models.JSONField(null=True, blank=True)  # routing.learned.LearnedHead.to_json(), with its encoder id
    learned_at = models.DateTimeField(null=True, blank=True)
    train_state = models.CharField(max_length=8, choices=TrainState.choices, default=TrainState.NONE, blank=True)
    train_error = models.CharField(max_length=300, blank=True)
    shadow = models.BooleanField(default=False, help_text="Decide beside the published version on sampled live traffic.")
    shadow_limit = models.PositiveIntegerField(default=1000, help_text="Stop sampling in shadow after this many decisions.")
    # Stop on a confidence bound too: when the Wilson interval of the metric excludes the threshold.
    stop_metric = models.CharField(max_length=12, choices=StopMetric.choices, default=StopMetric.NONE, blank=True)
    stop_threshold = models.FloatField(default=0.9)
    stop_confidence = models.FloatField(default=0.95)
    # Judged comparison (opt-in): on this share of sampled disagreements the draft's lane also
    # answers, off the request path, and the judge lane grades both answers blind, within a
    # daily token budget (gateway.judge).
    judge_share = models.FloatField(default=0.0)
    judge_lane = models.CharField(max_length=63, blank=True)
    judge_daily_tokens = models.PositiveIntegerField(default=50_000)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    published_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    published_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-number"]
        constraints = [
            models.UniqueConstraint(fields=["status"], condition=models.Q(status="published"), name="one_published_router_version"),
            models.UniqueConstraint(fields=["shadow"], condition=models.Q(shadow=True), name="one_shadow_router_version"),
        ]

    def __str__(self) -> str:
        return f"v{self.number} ({self.status})"


class EvalPrompt(models.Model):
    """A labelled prompt that scores a version; never used as a prototype."""

    text = models.TextField()
    label = models.CharField(max_length=64, validators=[LABEL_VALIDATOR], db_index=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["label", "id"]

    def __str__(self) -> str:
        return f"{self.label}: {self.text[:60]}"


class EvaluationState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"


class RouterEvaluation(models.Model):
    """One evaluation of a version, run by a worker (the first one embeds every evaluation
    prompt: 30-50 s under load): its progress while it runs, then the report it stored
    (routing.evaluation.report_to_json), which the evaluation page shows."""

    version = models.ForeignKey(RouterVersion, on_delete=models.CASCADE, related_name="evaluations")
    state = models.CharField(max_length=8, choices=EvaluationState.choices, default=EvaluationState.QUEUED)
    stage = models.CharField(max_length=120, blank=True)  # what it is doing, as the page says it
    done = models.PositiveIntegerField(default=0)
    total = models.PositiveIntegerField(default=0)
    result = models.JSONField(null=True, blank=True)
    error = models.CharField(max_length=300, blank=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            # a second click while one runs starts nothing: one active evaluation per version
            models.UniqueConstraint(fields=["version"], condition=models.Q(state__in=["queued", "running"]),
                                    name="one_active_evaluation_per_version"),
        ]

    def __str__(self) -> str:
        return f"evaluation of v{self.version.number} ({self.state})"

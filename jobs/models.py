"""Jobs, their steps and their log lines (docs/guide-admin.md, "Jobs and live logs")."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from lanes.models import Lane, LaneRevision, Node


class JobKind(models.TextChoices):
    NETWORK_CHECK = "network_check", "Network check"
    LAUNCH = "launch", "Launch"
    STOP = "stop", "Stop"
    RESTART = "restart", "Restart"
    STATUS = "status", "Status"
    NCCL_TEST = "nccl_test", "NCCL bus bandwidth"
    LATENCY_MATRIX = "latency_matrix", "RDMA latency matrix"
    LINK_BANDWIDTH = "link_bandwidth", "Link bandwidth"
    BENCHMARK = "benchmark", "Benchmark"
    INVENTORY = "inventory", "Model files inventory"
    MODEL_DOWNLOAD = "model_download", "Model download"
    MODEL_SYNC = "model_sync", "Model sync"
    IMAGE_SYNC = "image_sync", "Image sync"


FABRIC_KINDS = (JobKind.NCCL_TEST, JobKind.LATENCY_MATRIX, JobKind.LINK_BANDWIDTH)
# Kinds that change what runs on a node, or need its GPU and NICs to themselves (a fabric
# test next to a launch measures the launch): at most one of them per node at a time.
MUTATING_KINDS = (JobKind.LAUNCH, JobKind.STOP, JobKind.RESTART, *FABRIC_KINDS)


class JobState(models.TextChoices):
    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    CANCELLED = "cancelled"
    TIMED_OUT = "timed_out"
    LOST = "lost"


ACTIVE_STATES = (JobState.QUEUED, JobState.RUNNING)
FINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.TIMED_OUT, JobState.LOST)


class Job(models.Model):
    kind = models.CharField(max_length=20, choices=JobKind.choices)
    state = models.CharField(max_length=12, choices=JobState.choices, default=JobState.QUEUED)
    lane = models.ForeignKey(Lane, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs")
    lane_revision = models.ForeignKey(
        LaneRevision, null=True, blank=True, on_delete=models.SET_NULL, related_name="jobs"
    )
    # Every node the job touches (the lane's nodes, or the checked nodes): the per-node lock looks here.
    nodes = models.ManyToManyField(Node, blank=True, related_name="jobs")
    params = models.JSONField(default=dict, blank=True)
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    heartbeat_at = models.DateTimeField(null=True, blank=True)
    worker = models.CharField(max_length=200, blank=True, default="")
    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_requested_by = models.CharField(max_length=150, blank=True, default="")
    # A cancelled launch stops what it started, unless the admin chose to leave it for inspection.
    cancel_keep_running = models.BooleanField(default=False)
    result = models.JSONField(default=dict, blank=True)
    error = models.TextField(blank=True, default="")
    traceback = models.TextField(blank=True, default="")
    last_seq = models.PositiveIntegerField(default=0)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["state", "heartbeat_at"], name="job_state_heartbeat"),
            models.Index(fields=["kind", "state"], name="job_kind_state"),
            # The charts' job events in a time window, newest first (metrics.annotations), and
            # the jobs list's order: a range on created_at, not a scan of every job.
            models.Index(fields=["created_at"], name="job_created_at"),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} {self.target_label}"

    @property
    def target_label(self) -> str:
        if self.lane_id is not None and self.lane is not None:
            replica = self.params.get("replica")
            return f"lane {self.lane.name}" + (f" replica {replica}" if isinstance(replica, int) else "")
        names = self.params.get("nodes") or []
        return "node " + ", ".join(names) if names else "-"

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at or self.heartbeat_at or self.started_at
        return (end - self.started_at).total_seconds()


class StepState(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    SKIPPED = "skipped"
    WARNED = "warned"
    FAILED = "failed"
    CANCELLED = "cancelled"


class JobStep(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="steps")
    position = models.PositiveIntegerField()
    key = models.CharField(max_length=120)
    phase = models.CharField(max_length=20, blank=True, default="")
    node = models.CharField(max_length=63, blank=True, default="")
    title = models.CharField(max_length=300)
    state = models.CharField(max_length=12, choices=StepState.choices, default=StepState.PENDING)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    exit_code = models.IntegerField(null=True, blank=True)
    detail = models.TextField(blank=True, default="")

    class Meta:
        ordering = ["job", "position"]
        constraints = [models.UniqueConstraint(fields=["job", "position"], name="job_step_position_unique")]

    def __str__(self) -> str:
        return f"job #{self.job_id} step {self.position} {self.key}"

    @property
    def duration_s(self) -> float | None:
        if self.started_at is None or self.finished_at is None:
            return None
        return (self.finished_at - self.started_at).total_seconds()


class LogStream(models.TextChoices):
    STDOUT = "stdout"
    STDERR = "stderr"
    SYSTEM = "system"


class JobLogLine(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="log_lines")
    seq = models.PositiveIntegerField()
    created_at = models.DateTimeField()
    node = models.CharField(max_length=63, blank=True, default="")
    stream = models.CharField(max_length=8, choices=LogStream.choices, default=LogStream.STDOUT)
    text = models.TextField()

    class Meta:
        ordering = ["job", "seq"]
        constraints = [models.UniqueConstraint(fields=["job", "seq"], name="job_log_seq_unique")]

    def __str__(self) -> str:
        return f"job #{self.job_id} line {self.seq}"


class FabricResult(models.Model):
    """One fabric measurement of a set of nodes, kept so a regression shows on node pages."""

    kind = models.CharField(max_length=20, choices=JobKind.choices)
    node_set = models.CharField(max_length=600, help_text="Sorted node names, comma-separated.")
    nodes = models.ManyToManyField(Node, related_name="fabric_results")
    job = models.OneToOneField(Job, null=True, blank=True, on_delete=models.SET_NULL, related_name="fabric_result")
    created_at = models.DateTimeField(auto_now_add=True)
    verdict = models.CharField(max_length=8)  # ok | warn | fail
    # The figure a list compares: Gb/s (bus bandwidth, weakest cable) or us (worst average latency).
    headline = models.FloatField(null=True, blank=True)
    headline_unit = models.CharField(max_length=8, blank=True, default="")
    summary = models.JSONField(default=dict, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["node_set", "kind", "created_at"], name="fabric_result_set_kind")]

    def __str__(self) -> str:
        return f"{self.kind} {self.node_set} {self.verdict}"


class LaneWatchdog(models.Model):
    """The RDMA watchdog's settings and memory for one multi-node lane (seed 000: a moving
    average of the RTT above 12 us put the lane in degraded mode, context limited to 512K)."""

    lane = models.OneToOneField(Lane, on_delete=models.CASCADE, related_name="watchdog")
    enabled = models.BooleanField(default=True, help_text="Off: the lane opts out of the watchdog.")
    threshold_us = models.FloatField(default=12.0)
    # Hysteresis: back to serving only once the average is below this (empty: 80% of the threshold).
    recover_below_us = models.FloatField(null=True, blank=True)
    window = models.PositiveIntegerField(default=5, help_text="Samples in the moving average.")
    samples = models.JSONField(default=list, blank=True)
    average_us = models.FloatField(null=True, blank=True)
    degraded = models.BooleanField(default=False)
    last_measured_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")

    def __str__(self) -> str:
        return f"watchdog {self.lane_id}"

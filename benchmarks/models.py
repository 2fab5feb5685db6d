"""Benchmark runs (one per benchmark job) and their levels, saved as each level ends so a
cancelled or failed sweep keeps what it measured."""

from __future__ import annotations

from django.db import models

from jobs.models import Job
from lanes.models import Lane, LaneRevision


class BenchmarkRun(models.Model):
    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="benchmark")
    lane = models.ForeignKey(Lane, null=True, blank=True, on_delete=models.SET_NULL, related_name="benchmarks")
    lane_name = models.CharField(max_length=100)  # kept if the lane is deleted
    lane_revision = models.ForeignKey(LaneRevision, null=True, blank=True, on_delete=models.SET_NULL,
                                      related_name="benchmarks")
    revision_number = models.PositiveIntegerField(null=True, blank=True)
    label = models.CharField(max_length=100, blank=True, default="")
    params = models.JSONField(default=dict)
    levels_planned = models.PositiveIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"benchmark #{self.job_id} {self.lane_name}"


class BenchmarkLevel(models.Model):
    run = models.ForeignKey(BenchmarkRun, on_delete=models.CASCADE, related_name="levels")
    position = models.PositiveIntegerField()
    target = models.CharField(max_length=10)  # direct or gateway
    concurrency = models.PositiveIntegerField(null=True, blank=True)
    request_rate = models.FloatField(null=True, blank=True)
    stats = models.JSONField(default=dict)
    metrics = models.JSONField(default=dict)  # the lane's /metrics deltas over the level
    fabric = models.JSONField(default=dict)  # RoCE bytes per node/device over the level
    prime = models.JSONField(default=dict)  # the cache-priming request, on cache-hit runs
    finished_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["run", "position"]
        constraints = [models.UniqueConstraint(fields=["run", "position"], name="benchmark_level_position")]

    def __str__(self) -> str:
        return f"{self.run} {self.target} {self.level_label}"

    @property
    def level_label(self) -> str:
        if self.concurrency is not None:
            return f"C={self.concurrency}"
        return f"{self.request_rate:g} req/s" if self.request_rate is not None else "replay"

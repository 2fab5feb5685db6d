"""Samples (raw, 1-minute, 1-hour), scrape state, usage per key/lane, alerts and webhook
deliveries.

A sample row holds every series of one target at one instant (`values`), so a chart is
one indexed range scan on (kind, target, ts) — the primary key. On PostgreSQL the raw and
1-minute tables are partitioned by day (metrics/partitions.py) and retention drops whole
partitions; on SQLite they are plain tables and retention deletes rows.
"""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from core.validators import FiniteNumber


class TargetKind(models.TextChoices):
    LANE = "lane"
    NODE = "node"


class AlertKind(models.TextChoices):
    """What an alert is about: a scrape target's kind, or a token budget's owner."""

    LANE = "lane"
    NODE = "node"
    TEAM = "team"
    KEY = "key"


class SampleBase(models.Model):
    pk = models.CompositePrimaryKey("kind", "target", "ts")
    kind = models.CharField(max_length=4, choices=TargetKind.choices)
    target = models.CharField(max_length=63)
    ts = models.DateTimeField()
    values = models.JSONField(default=dict)

    class Meta:
        abstract = True

    def __str__(self) -> str:
        return f"{self.kind}:{self.target} {self.ts:%Y-%m-%d %H:%M:%S}"


class Sample(SampleBase):
    """Raw: one row per target per scrape."""

    class Meta:
        # The dashboard's sparklines read every target of a kind over the last minutes.
        indexes = [models.Index(fields=["kind", "ts"], name="metrics_sample_kind_ts")]


class SampleMinute(SampleBase):
    """Mean per minute; `peaks` holds each series' maximum (a spike stays visible)."""

    peaks = models.JSONField(default=dict)


class SampleHour(SampleBase):
    peaks = models.JSONField(default=dict)


class ScrapeTarget(models.Model):
    """The last scrape of a target: health for pages, alerts and /metrics, and the previous
    cumulative reading that the next scrape's rates are computed from."""

    kind = models.CharField(max_length=4, choices=TargetKind.choices)
    target = models.CharField(max_length=63)
    ok = models.BooleanField(default=False)
    error = models.CharField(max_length=500, blank=True, default="")
    consecutive_failures = models.PositiveIntegerField(default=0)
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    last_ok_at = models.DateTimeField(null=True, blank=True)
    duration_ms = models.FloatField(default=0)
    reading = models.JSONField(null=True, blank=True)
    figures = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["kind", "target"], name="metrics_scrapetarget_unique")]

    def __str__(self) -> str:
        return f"{self.kind}:{self.target} {'ok' if self.ok else 'failing'}"


# Bounds of the gateway's latency histogram (ms), for /metrics and long-range percentiles.
LATENCY_BUCKETS_MS = (50, 100, 250, 500, 1000, 2500, 5000, 10000, 30000, 60000, 120000, 300000)


class UsageHour(models.Model):
    """Gateway usage per hour, API key and lane, rolled up from the request log so that a
    month of usage is a few hundred rows, not tens of millions."""

    hour = models.DateTimeField()
    key_id = models.BigIntegerField(null=True, blank=True)
    key_name = models.CharField(max_length=100, blank=True, default="")
    lane = models.CharField(max_length=63, blank=True, default="")
    status = models.PositiveSmallIntegerField(default=200)
    route = models.CharField(max_length=16, blank=True, default="")
    requests = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    latency_ms_sum = models.FloatField(default=0)
    ttft_ms_sum = models.FloatField(default=0)
    ttft_count = models.BigIntegerField(default=0)
    # Cumulative counts of requests at or under each bound of LATENCY_BUCKETS_MS (its order).
    latency_buckets = models.JSONField(default=list)
    # The TTFT histogram on the same bounds, plus a last entry: the requests it counts (those
    # with a first token, its +Inf). [] in hours rolled up before it existed: they add nothing.
    ttft_buckets = models.JSONField(default=list)
    # The fastest and slowest request (and first token) it counts: quantiles read from the
    # buckets are clamped to them (metrics.parsing.histogram_estimate). Null: none, or rolled
    # up before they were kept.
    latency_ms_min = models.FloatField(null=True, blank=True)
    latency_ms_max = models.FloatField(null=True, blank=True)
    ttft_ms_min = models.FloatField(null=True, blank=True)
    ttft_ms_max = models.FloatField(null=True, blank=True)
    # The lane-hours this row's requests pay (the cost model, metrics.usage): its latency over
    # the latency of every request on the lane that hour, times the part of the hour gone by at
    # the rollup's run (1 once the hour is over); a lane's rows of an hour add up to that part.
    # 0 in hours rolled up before it was kept.
    lane_hours = models.FloatField(default=0)

    class Meta:
        indexes = [models.Index(fields=["hour"], name="metrics_usagehour_hour")]

    def __str__(self) -> str:
        return f"{self.hour:%Y-%m-%d %H}h {self.key_name or '-'} {self.lane}"


class UsageTier(models.Model):
    """What the coarser usage tiers keep per bucket, API key and lane, summed from UsageHour
    (metrics.storage.usage_day_rollup, one rule for both): the usage page's longer charts read
    a few hundred rows, with latency percentiles and cost, instead of every hour's."""

    key_id = models.BigIntegerField(null=True, blank=True)
    key_name = models.CharField(max_length=100, blank=True, default="")
    lane = models.CharField(max_length=63, blank=True, default="")
    requests = models.BigIntegerField(default=0)
    errors = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    # As in UsageHour, summed over the bucket.
    latency_ms_sum = models.FloatField(default=0)
    latency_buckets = models.JSONField(default=list)
    latency_ms_min = models.FloatField(null=True, blank=True)
    latency_ms_max = models.FloatField(null=True, blank=True)
    lane_hours = models.FloatField(default=0)

    class Meta:
        abstract = True


class UsageDay(UsageTier):
    """Usage per day, API key and lane: the usage table over a month or a year reads a few
    thousand rows, the day buckets of a month's chart a few hundred."""

    day = models.DateField()

    class Meta:
        indexes = [models.Index(fields=["day"], name="metrics_usageday_day")]

    def __str__(self) -> str:
        return f"{self.day} {self.key_name or '-'} {self.lane}"


class UsageSixHours(UsageTier):
    """Usage per 6 hours (from 00:00, 06:00, 12:00 and 18:00 UTC), API key and lane: the
    usage page's week and fortnight charts read 28 or 56 buckets' rows (about 15 each at seed
    000's traffic) where the hourly rollup has 25 rows an hour (per status and route too)."""

    start = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["start"], name="metrics_usagesixhours_start")]

    def __str__(self) -> str:
        return f"{self.start:%Y-%m-%d %H}h+6h {self.key_name or '-'} {self.lane}"


class GatewayDay(models.Model):
    """The gateway per day, lane and status (from UsageHour), with the latency and TTFT histograms:
    the gateway page's 7- and 30-day figures (percentiles included) read a few hundred rows
    whatever the traffic (at seed 000's peak the hourly rollup holds ~200,000 rows a month)."""

    day = models.DateField()
    lane = models.CharField(max_length=63, blank=True, default="")
    status = models.PositiveSmallIntegerField(default=200)
    requests = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    latency_ms_sum = models.FloatField(default=0)
    ttft_ms_sum = models.FloatField(default=0)
    ttft_count = models.BigIntegerField(default=0)
    # Cumulative counts at or under each bound of LATENCY_BUCKETS_MS, as in UsageHour.
    latency_buckets = models.JSONField(default=list)
    # The TTFT histogram with its +Inf count last, as in UsageHour.
    ttft_buckets = models.JSONField(default=list)
    # As in UsageHour.
    latency_ms_min = models.FloatField(null=True, blank=True)
    latency_ms_max = models.FloatField(null=True, blank=True)
    ttft_ms_min = models.FloatField(null=True, blank=True)
    ttft_ms_max = models.FloatField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["day", "lane", "status"], name="metrics_gatewayday_unique")]

    def __str__(self) -> str:
        return f"{self.day} {self.lane or '-'} {self.status}"


class GatewayTotal(models.Model):
    """Running totals per lane, status and route of every hour of UsageHour before
    GatewayTotalMark.folded_before: /metrics' counters and histogram are these plus the
    hours since, so they never go down when old hours leave retention (an hour is folded
    in before it can be deleted, in the retention step's transaction)."""

    lane = models.CharField(max_length=63, blank=True, default="")
    status = models.PositiveSmallIntegerField(default=200)
    route = models.CharField(max_length=16, blank=True, default="")
    requests = models.BigIntegerField(default=0)
    prompt_tokens = models.BigIntegerField(default=0)
    completion_tokens = models.BigIntegerField(default=0)
    latency_ms_sum = models.FloatField(default=0)
    # Cumulative counts at or under each bound of LATENCY_BUCKETS_MS, as in UsageHour.
    latency_buckets = models.JSONField(default=list)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["lane", "status", "route"], name="metrics_gatewaytotal_unique")
        ]

    def __str__(self) -> str:
        return f"{self.lane or '-'} {self.status} {self.route or '-'}: {self.requests}"


class GatewayTotalMark(models.Model):
    """One row: the hours of UsageHour before `folded_before` are in GatewayTotal (null:
    none yet)."""

    folded_before = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"folded before {self.folded_before}"


class AlertState(models.TextChoices):
    PENDING = "pending"  # condition true, not yet for the rule's duration
    OPEN = "open"
    RESOLVED = "resolved"


class Alert(models.Model):
    rule = models.CharField(max_length=32)
    kind = models.CharField(max_length=4, choices=AlertKind.choices)
    target = models.CharField(max_length=63)
    state = models.CharField(max_length=10, choices=AlertState.choices, default=AlertState.PENDING)
    message = models.CharField(max_length=300)
    value = models.FloatField(null=True, blank=True)
    since = models.DateTimeField(default=timezone.now)  # condition first seen
    opened_at = models.DateTimeField(null=True, blank=True)
    resolved_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)
    acknowledged_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["-id"]
        constraints = [
            # One live alert per rule and target; history keeps the resolved ones.
            models.UniqueConstraint(
                fields=["rule", "kind", "target"],
                condition=~models.Q(state="resolved"),
                name="metrics_alert_one_live",
            )
        ]
        indexes = [models.Index(fields=["state"], name="metrics_alert_state")]

    def __str__(self) -> str:
        return f"{self.rule} {self.kind}:{self.target} {self.state}"


class WebhookState(models.TextChoices):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"  # gave up after the last attempt


class WebhookDelivery(models.Model):
    """An alert change to POST. Beat sends what is due; a failure waits backoff·2^n."""

    alert = models.ForeignKey(Alert, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=16)
    payload = models.JSONField()
    state = models.CharField(max_length=10, choices=WebhookState.choices, default=WebhookState.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    last_error = models.CharField(max_length=300, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        indexes = [models.Index(fields=["state", "next_attempt_at"], name="metrics_webhook_due")]

    def __str__(self) -> str:
        return f"{self.event} alert #{self.alert_id} {self.state}"


class CostModel(models.Model):
    """One row (pk 1): what a node-hour costs, so the usage page can put a price on a request
    (metrics.usage: a lane's nodes' cost over an hour, split over that hour's requests on the
    lane in proportion to their latency, i.e. the lane-seconds each used). Admins set it
    (metrics.usage.cost_model_set: validated, audited). The defaults are seed 000's figures:
    1,100 W for 3 Sparks and about €0.001 a request at 14,500 requests a day."""

    currency = models.CharField(max_length=3, default="EUR", validators=[RegexValidator(
        r"^[A-Z]{3}\Z", "Enter a currency code of three capital letters (ISO 4217, e.g. EUR).")])
    # The node's purchase price over its life, per hour.
    node_hour_amortization = models.FloatField(default=0.11, validators=[FiniteNumber(0, 1000)])
    watts_per_node = models.FloatField(default=366.7, validators=[FiniteNumber(0, 10000)])  # 1,100 W / 3 Sparks
    price_per_kwh = models.FloatField(default=0.25, validators=[FiniteNumber(0, 100)])
    updated_at = models.DateTimeField(auto_now=True)

    def __str__(self) -> str:
        return (f"{self.node_hour_amortization} {self.currency}/node-hour + {self.watts_per_node} W × "
                f"{self.price_per_kwh} {self.currency}/kWh")

    @property
    def node_hour(self) -> float:
        """What one node costs an hour: amortization plus its power (W / 1000 × price per kWh)."""
        return self.node_hour_amortization + self.watts_per_node / 1000 * self.price_per_kwh

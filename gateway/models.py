"""Gateway models: teams, API keys, the request log, mirrored samples.

Gateway rows are kept small on purpose: LiteLLM's spend log grew to 26 GB for 5.9M rows
because every row carried a copy of the model map (their #41499). A request log row here
is a handful of numbers and short strings; prompt text only when the key opts in.

The tables keep the names they had in the routing app (db_table): the gateway's first
migration takes them over in Django's state only, so an existing database keeps every row."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from core.validators import POSITIVE_BIGINT, POSITIVE_INT, TEXT
from lanes.models import Lane


class Team(models.Model):
    """A group of people and the API keys they use. A key belongs to at most one team; the
    team's lanes bound its keys' lanes (a key inherits them and may narrow them)."""

    name = models.CharField(max_length=100, unique=True, validators=TEXT)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="teams")
    # Empty = every lane.
    allowed_lanes = models.ManyToManyField(Lane, blank=True, related_name="teams")
    # Its share of a saturated lane (gateway.fair) against other teams and keys of no team; its
    # keys share it among themselves by their own weights.
    fair_weight = models.PositiveSmallIntegerField(default=1, db_default=1, validators=POSITIVE_INT,
                                                   help_text="Share of a full lane against other teams (2 = twice "
                                                             "a team of 1); its keys share it by their weights.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class ApiKey(models.Model):
    """An API client's credential. The secret is shown once at creation; only its SHA-256
    is stored (the token has 256 bits of entropy, so a plain hash is enough)."""

    name = models.CharField(max_length=100, validators=TEXT)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="api_keys"
    )
    # A team with keys cannot be deleted: its keys' usage and budgets would lose their owner.
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.PROTECT, related_name="keys")
    prefix = models.CharField(max_length=24, db_index=True, help_text="First characters of the secret, shown to tell keys apart.")
    secret_hash = models.CharField(max_length=64, unique=True)
    # Empty = every lane.
    allowed_lanes = models.ManyToManyField(Lane, blank=True, related_name="api_keys")
    # Null = `auto` (the router decides); set = requests with model="auto" are pinned to it
    # (the seed's agents pin fast agents to qwen and long refactors to deepseek).
    default_lane = models.ForeignKey(Lane, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    rpm_limit = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT, help_text="Requests per minute; empty = no limit.")
    tpm_limit = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT, help_text="Tokens per minute; empty = no limit.")
    max_parallel = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT, help_text="Requests in flight; empty = no limit.")
    # The one opt-in for prompt text (gateway.capture): stored with secrets redacted, in the
    # request log (searchable there), as the router's replay set (CapturedPrompt), and sent to
    # judged comparisons of a shadow draft; kept as long as the request log. Off: none of it.
    log_prompts = models.BooleanField(default=False, help_text=(
        "Store this key's prompts (secrets redacted): in the request log, for router replay and judged comparison."))
    # Fair share of a saturated lane (gateway.fair): this key's weight among the keys waiting
    # for a lane's slots, and its class (a request may lower it, never raise it).
    fair_weight = models.PositiveSmallIntegerField(default=1, db_default=1, validators=POSITIVE_INT,
                                                   help_text="Share of a full lane against other keys (2 = twice a key of 1).")
    priority = models.CharField(max_length=12, choices=[("interactive", "interactive"), ("batch", "batch")],
                                default="interactive", db_default="interactive",
                                help_text="interactive before batch on a full lane; batch uses the slack.")
    expires_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        db_table = "routing_apikey"  # the table of the routing app it came from
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.name} ({self.prefix}…)"

    @property
    def is_active(self) -> bool:
        if self.revoked_at is not None:
            return False
        return self.expires_at is None or self.expires_at > timezone.now()

    @property
    def default_route(self) -> str:
        return self.default_lane.name if self.default_lane_id and self.default_lane else "auto"


class BudgetPeriod(models.TextChoices):
    DAY = "day"
    MONTH = "month"


class Budget(models.Model):
    """Tokens a team (all its keys together) or one key may use per calendar day or month, in
    the budgets' time zone (GATEWAY_BUDGET_TIME_ZONE). Prompt and completion tokens count
    separately as well as together: the seed's traffic is long-prompt heavy. Usage is counted
    in Redis (gateway.budgets); this row holds the limits."""

    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.CASCADE, related_name="budgets")
    key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.CASCADE, related_name="budgets")
    period = models.CharField(max_length=8, choices=BudgetPeriod.choices, default=BudgetPeriod.DAY)
    prompt_tokens = models.PositiveBigIntegerField(null=True, blank=True, validators=POSITIVE_BIGINT,
                                                   help_text="Prompt tokens per period; empty = no limit.")
    completion_tokens = models.PositiveBigIntegerField(null=True, blank=True, validators=POSITIVE_BIGINT,
                                                       help_text="Completion tokens per period; empty = no limit.")
    total_tokens = models.PositiveBigIntegerField(null=True, blank=True, validators=POSITIVE_BIGINT,
                                                  help_text="Prompt + completion tokens per period; empty = no limit.")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["id"]
        constraints = [
            models.CheckConstraint(condition=models.Q(team__isnull=True) ^ models.Q(key__isnull=True),
                                   name="budget_team_xor_key"),
            models.UniqueConstraint(fields=["team", "period"], name="budget_one_per_team_period"),
            models.UniqueConstraint(fields=["key", "period"], name="budget_one_per_key_period"),
        ]

    def __str__(self) -> str:
        owner = f"team {self.team}" if self.team_id else f"key {self.key}"
        return f"{owner} per {self.period}"


class RouteReason(models.TextChoices):
    ROUTER = "router"  # model="auto": the semantic router chose
    DEFAULT = "default"  # model="auto": no label reached the threshold (or no version is published): the default lane
    KEY_DEFAULT = "key_default"  # model="auto" with a key pinned to a lane
    EXPLICIT = "explicit"  # a lane or served model name, or a per-lane URL
    FALLBACK = "fallback"  # the chosen lane provably could not take it: its fallback did
    CONTEXT = "context"  # model="auto": the router's lane could not hold the prompt; one that fits did


class RequestLog(models.Model):
    """One row per gateway request, written in batches off the hot path."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    request_id = models.CharField(max_length=40)
    key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    endpoint = models.CharField(max_length=32)  # chat.completions | completions
    requested_model = models.CharField(max_length=200, blank=True)
    lane = models.CharField(max_length=63, blank=True, db_index=True)
    # Which of the lane's replicas answered (LaneReplica.index); empty when none was sent to.
    replica = models.PositiveSmallIntegerField(null=True, blank=True)
    route_reason = models.CharField(max_length=16, choices=RouteReason.choices, blank=True)
    route_score = models.FloatField(null=True, blank=True)
    route_label = models.CharField(max_length=64, blank=True)
    route_prototype = models.CharField(max_length=200, blank=True, db_default="", help_text="The best-matching prototype's text (cut).")
    router_version = models.PositiveIntegerField(null=True, blank=True)
    # Shadow evaluation: the draft's decision beside the published one (no upstream call).
    # The new text columns have a database default: rows written by raw SQL (the purge's
    # bulk tests, older processes during a rolling deploy) stay valid.
    shadow_version = models.PositiveIntegerField(null=True, blank=True)
    shadow_lane = models.CharField(max_length=63, blank=True, db_default="")
    shadow_label = models.CharField(max_length=64, blank=True, db_default="")
    shadow_score = models.FloatField(null=True, blank=True)
    stream = models.BooleanField(default=False)
    status = models.PositiveSmallIntegerField()
    error_code = models.CharField(max_length=64, blank=True)
    prompt_tokens = models.PositiveIntegerField(null=True, blank=True)
    completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    # Who counted the tokens: "" the lane itself; "tokenize" the gateway, exactly, with the
    # lane's /tokenize; "estimate" the gateway, about 4 characters a token (no /tokenize).
    usage_source = models.CharField(max_length=8, blank=True, default="", db_default="")
    ttft_ms = models.FloatField(null=True, blank=True)
    latency_ms = models.FloatField()
    # When the gateway received the request (created_at is when its batch was written): the
    # arrival times a benchmark replays. Empty on rows written before it was kept.
    received_at = models.DateTimeField(null=True, blank=True)
    upstream_ms = models.FloatField(null=True, blank=True)
    # Time waited in the lane's fair queue (gateway.fair), included in ttft_ms and latency_ms;
    # empty when the request never queued (the lane had a slot, or no known slots).
    queue_ms = models.FloatField(null=True, blank=True)
    priority = models.CharField(max_length=12, blank=True, default="", db_default="")
    prompt_text = models.TextField(blank=True, default="")
    # The conversation it belongs to (gateway.route.conversation_digest: its first messages),
    # so a conversation-level outcome reaches each of its requests. Empty: no messages.
    conversation = models.CharField(max_length=32, blank=True, default="", db_default="")

    class Meta:
        db_table = "routing_requestlog"
        ordering = ["-id"]
        indexes = [
            models.Index(fields=["key", "-id"], name="requestlog_key_recent"),
            # The request log page filtered by lane (and status), newest first (keyset on id).
            models.Index(fields=["lane", "status", "-id"], name="requestlog_lane_status_recent"),
            models.Index(fields=["request_id"], name="requestlog_request_id"),
            models.Index(fields=["key", "conversation"], name="requestlog_key_conversation"),
        ]

    def __str__(self) -> str:
        return f"{self.request_id} {self.lane} {self.status}"


class CapturedPrompt(models.Model):
    """One prompt of a key that opted in (ApiKey.log_prompts): the text the router embeds
    (the last user message), secrets redacted before it is stored (gateway.capture), cut
    to CAPTURE_MAX_CHARS, the key's last CAPTURE_PER_KEY kept, and no longer than the
    request log. Router replay (and later the teams' and benchmarks' work) reads these."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="+")
    request_id = models.CharField(max_length=40, db_index=True)
    text = models.TextField()
    lane = models.CharField(max_length=63, blank=True)  # the lane that answered
    route_label = models.CharField(max_length=64, blank=True)
    router_version = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["-id"]
        indexes = [models.Index(fields=["key", "-id"], name="capturedprompt_key_recent")]

    def __str__(self) -> str:
        return f"{self.request_id} {self.text[:40]}"


class RequestOutcome(models.Model):
    """How a request went, told by the agent that sent it (POST /v1/feedback): seed 000's
    (task, model, latency, quality score), joined to the request log by request_id. A
    conversation-level outcome is one row per request of that conversation."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    key = models.ForeignKey(ApiKey, on_delete=models.CASCADE, related_name="+")
    request_id = models.CharField(max_length=40, db_index=True)
    score = models.FloatField()  # 0 (failure) … 1 (success); a boolean is 0 or 1
    comment = models.TextField(blank=True, default="")
    task = models.CharField(max_length=64, blank=True, default="")
    conversation = models.BooleanField(default=False)  # given for the whole conversation

    class Meta:
        ordering = ["-id"]
        constraints = [models.UniqueConstraint(fields=["request_id"], name="one_outcome_per_request")]

    def __str__(self) -> str:
        return f"{self.request_id} {self.score}"


class MirrorSample(models.Model):
    """A sampled request mirrored to an external endpoint after the client's answer (the
    draft router's "shadow" decisions are another thing: RequestLog.shadow_*)."""

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    request_id = models.CharField(max_length=40)
    key = models.ForeignKey(ApiKey, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    lane = models.CharField(max_length=63)
    external_model = models.CharField(max_length=200)
    local_latency_ms = models.FloatField()
    external_latency_ms = models.FloatField(null=True, blank=True)
    local_chars = models.PositiveIntegerField()
    external_chars = models.PositiveIntegerField(null=True, blank=True)
    local_completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    external_completion_tokens = models.PositiveIntegerField(null=True, blank=True)
    divergence = models.FloatField(null=True, blank=True, help_text="0 = same words, 1 = nothing in common.")
    error = models.CharField(max_length=300, blank=True)

    class Meta:
        db_table = "routing_shadowsample"
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"mirror {self.request_id} → {self.external_model}"


class KeyedRequest(models.Model):
    """The durable trace of a keyed request (an Idempotency-Key, or an SDK's retry marker):
    admitted, and so possibly sent, then done. Redis holds the same record for the hot
    path; this row outlives a Redis that lost its memory (gateway.durable), so a retry
    after a Redis restart is still never sent twice. No answer is kept here."""

    name = models.CharField(max_length=300, unique=True)  # the Redis record's name (gateway.keys.key_names)
    fingerprint = models.CharField(max_length=32)
    request_id = models.CharField(max_length=40)
    done = models.BooleanField(default=False)
    expires_at = models.DateTimeField(db_index=True)

    def __str__(self) -> str:
        return f"{self.name} {'done' if self.done else 'in flight'}"


class JudgedComparison(models.Model):
    """One judged comparison of a shadow draft (gateway.judge): after the client had the
    published version's answer, the draft's lane answered the same request and the judge
    lane graded the two answers blind (in a random order). Tokens are ours, not the key's."""

    class Verdict(models.TextChoices):
        DRAFT = "draft", "the draft's answer is better"
        PUBLISHED = "published", "the published version's answer is better"
        TIE = "tie"
        UNPARSED = "unparsed", "the judge's verdict could not be read"
        ERROR = "error", "a lane failed"
        BUDGET = "budget", "skipped: the day's token budget is spent"

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    request_id = models.CharField(max_length=40, db_index=True)
    router_version = models.PositiveIntegerField(db_index=True)  # the shadow draft
    published_lane = models.CharField(max_length=63)
    draft_lane = models.CharField(max_length=63)
    judge_lane = models.CharField(max_length=63)
    draft_first = models.BooleanField(default=False)  # the draft's answer was shown as "A"
    verdict = models.CharField(max_length=10, choices=Verdict.choices)
    answer_tokens = models.PositiveIntegerField(default=0)  # the draft lane's answer (prompt + completion)
    judge_tokens = models.PositiveIntegerField(default=0)
    reason = models.CharField(max_length=300, blank=True)  # the judge's words, or the error

    class Meta:
        ordering = ["-id"]

    def __str__(self) -> str:
        return f"{self.request_id} v{self.router_version} {self.verdict}"

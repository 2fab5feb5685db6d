"""Nodes and lanes. A lane does not know how it is launched or who routes
to it: no imports from jobs or routing here."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import models

from core.validators import (
    GIB,
    JSON,
    PORT,
    POSITIVE_BIGINT,
    POSITIVE_GIB,
    POSITIVE_INT,
    TEXT,
    UTILIZATION,
)


class NodeState(models.TextChoices):
    UNKNOWN = "unknown"
    ONLINE = "online"
    UNREACHABLE = "unreachable"
    MAINTENANCE = "maintenance"


class Transport(models.TextChoices):
    SSH = "ssh", "SSH"
    LOCAL = "local", "Local (simulated node on this machine)"


class Node(models.Model):
    name = models.SlugField(max_length=63, unique=True, validators=TEXT)
    address = models.CharField(max_length=253, validators=TEXT, help_text="Management address or host name (SSH).")
    transport = models.CharField(max_length=8, choices=Transport.choices, default=Transport.SSH)
    ssh_port = models.PositiveIntegerField(default=22, validators=PORT)
    ssh_user = models.CharField(max_length=64, default="spark", validators=TEXT)
    # Fernet token of the private key (lanes.crypto); never shown back, never logged.
    ssh_private_key_encrypted = models.TextField(blank=True, default="")
    # Pinned host key, one OpenSSH public-key line ("ssh-ed25519 AAAA..."); a mismatch fails loudly.
    ssh_host_key = models.TextField(blank=True, default="", validators=TEXT)
    # A host key seen by a capture job, waiting for an admin to confirm it (lanes.node_services).
    ssh_host_key_pending = models.TextField(blank=True, default="")
    runtime_command = models.CharField(max_length=200, default="docker", validators=TEXT)
    # Directory of a sparksim node; empty on a real Spark (docs/runtime-contract.md).
    sim_dir = models.CharField(max_length=500, blank=True, default="", validators=TEXT)
    memory_gib = models.FloatField(default=128, validators=POSITIVE_GIB)
    os_reserve_gib = models.FloatField(default=8, validators=GIB)
    labels = models.JSONField(default=list, blank=True, validators=JSON)
    state = models.CharField(max_length=16, choices=NodeState.choices, default=NodeState.UNKNOWN)
    last_seen = models.DateTimeField(null=True, blank=True)
    # Consecutive failed probes of the health watcher (lanes.watcher): N of them → unreachable.
    health_failures = models.PositiveIntegerField(default=0)
    network_report = models.JSONField(default=dict, blank=True, validators=JSON)
    network_checked_at = models.DateTimeField(null=True, blank=True)
    # What the node's disk holds (lanes.model_files): HF cache models, images, free bytes;
    # written by the inventory read after every inventory, download, sync and launch job.
    inventory = models.JSONField(default=dict, blank=True, validators=JSON)
    inventory_at = models.DateTimeField(null=True, blank=True)
    # Fernet token (lanes.crypto) of the private key this node uses to copy model files to
    # the other nodes (rsync over SSH); its public key goes into their authorized_keys.
    transfer_key_encrypted = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def clean(self) -> None:
        memory, reserve = self.memory_gib, self.os_reserve_gib
        if isinstance(memory, float | int) and isinstance(reserve, float | int) and 0 < memory <= reserve:
            raise ValidationError({"os_reserve_gib": "The OS reserve must be less than the node's memory."})


class Executor(models.TextChoices):
    RAY = "ray", "Ray"
    NATIVE = "native", "Native multi-node (--nnodes/--node-rank)"


# Seed 000: the DeepSeek lane held 512K tokens instead of 1M while its RDMA link was slow.
DEFAULT_DEGRADED_CONTEXT_LIMIT = 524_288


class LaneState(models.TextChoices):
    STOPPED = "stopped"
    STARTING = "starting"
    SERVING = "serving"
    DEGRADED = "degraded"
    FAILED = "failed"
    STOPPING = "stopping"
    # The head node itself does not answer (not only the engine).
    UNREACHABLE = "unreachable"
    # The portal (re)started: not shown as true until the health watcher has probed it.
    CHECKING = "checking"
    # Answers /health but makes no progress (the guardian, lanes.liveness): out of the gateway.
    STALLED = "stalled"


class RestartPolicy(models.TextChoices):
    NEVER = "never"
    ON_FAILURE = "on-failure"


class SchedulingPolicy(models.TextChoices):
    # vLLM's --scheduling-policy: arrival order, or each request's `priority` (lower first).
    FCFS = "fcfs"
    PRIORITY = "priority"


class DesiredState(models.TextChoices):
    STOPPED = "stopped"
    SERVING = "serving"


class Lane(models.Model):
    name = models.SlugField(max_length=63, unique=True, validators=TEXT)
    model_id = models.CharField(max_length=200, validators=TEXT)
    model_revision = models.CharField(max_length=100, blank=True, default="", validators=TEXT)
    served_model_name = models.CharField(max_length=200, blank=True, default="", validators=TEXT)
    image = models.CharField(max_length=300, validators=TEXT, help_text="Pinned by digest: repo@sha256:...")
    tensor_parallel_size = models.PositiveIntegerField(default=1, validators=POSITIVE_INT)
    executor = models.CharField(max_length=8, choices=Executor.choices, default=Executor.RAY)
    api_port = models.PositiveIntegerField(default=8000, validators=PORT)
    master_port = models.PositiveIntegerField(default=29501, validators=PORT, help_text="Ray port or --master-port.")
    container_name = models.SlugField(max_length=63, default="vllm_node", validators=TEXT)
    # vLLM settings
    max_model_len = models.PositiveIntegerField(validators=POSITIVE_INT, help_text="Pinned: 'auto' shrank 1,048,576 to 937,472.")
    kv_cache_memory_bytes = models.BigIntegerField(null=True, blank=True, validators=POSITIVE_BIGINT)
    gpu_memory_utilization = models.FloatField(null=True, blank=True, validators=UTILIZATION)
    max_num_seqs = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT)
    # Requests the gateway lets into one replica at once (gateway.fair); empty = max_num_seqs.
    gateway_slots = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT,
                                                help_text="Requests the gateway sends one replica at once; "
                                                          "more wait in its fair queue. Empty = max_num_seqs.")
    max_num_batched_tokens = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT)
    # --scheduling-policy; with priority the gateway sets each request's `priority` (gateway.fair).
    scheduling_policy = models.CharField(max_length=16, choices=SchedulingPolicy.choices, default=SchedulingPolicy.FCFS,
                                         help_text="vLLM's --scheduling-policy. priority: the gateway ranks each "
                                                   "request by its key's class and fair share.")
    kv_cache_dtype = models.CharField(max_length=32, blank=True, default="", validators=TEXT)
    enable_prefix_caching = models.BooleanField(null=True, blank=True)
    enable_chunked_prefill = models.BooleanField(null=True, blank=True)
    speculative_config = models.JSONField(null=True, blank=True, validators=JSON)
    max_cudagraph_capture_size = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT)
    extra_args = models.JSONField(default=list, blank=True, validators=JSON)
    container_env = models.JSONField(default=dict, blank=True, validators=JSON)  # plain values only
    # Secret container env: name -> Fernet token (lanes.crypto); decrypted only in the worker at launch.
    secret_env = models.JSONField(default=dict, blank=True, validators=JSON)
    # memory budget
    weights_gib = models.FloatField(default=0, validators=GIB)
    kv_bytes_per_token = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT)
    runtime_overhead_gib = models.FloatField(default=6, validators=GIB)
    # availability
    fallback = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.SET_NULL, related_name="fallback_for"
    )
    degraded_context_limit = models.PositiveIntegerField(null=True, blank=True, validators=POSITIVE_INT)
    # What the guardian does when a lane that should serve fails (lanes.restart_policy).
    restart_policy = models.CharField(max_length=16, choices=RestartPolicy.choices, default=RestartPolicy.NEVER)
    restart_limit = models.PositiveSmallIntegerField(default=3)
    restart_window_s = models.PositiveIntegerField(default=1800)
    restart_backoff_s = models.PositiveIntegerField(default=30)
    desired_state = models.CharField(max_length=16, choices=DesiredState.choices, default=DesiredState.STOPPED)
    observed_state = models.CharField(max_length=16, choices=LaneState.choices, default=LaneState.STOPPED)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    state_reason = models.CharField(max_length=500, blank=True, default="")
    # The health watcher (lanes.watcher): consecutive failed probes, and the last probe's time.
    health_failures = models.PositiveIntegerField(default=0)
    health_checked_at = models.DateTimeField(null=True, blank=True)
    revision = models.PositiveIntegerField(default=0, help_text="Number of the current revision.")
    nodes = models.ManyToManyField(Node, through="LaneNode", related_name="lanes")
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def public_model_name(self) -> str:
        return self.served_model_name or self.name

    def replica_rows(self) -> list[LaneReplica]:
        """The lane's replicas by index (a list of lanes prefetches them: selectors)."""
        if "replicas" in getattr(self, "_prefetched_objects_cache", {}):
            return sorted(self.replicas.all(), key=lambda r: r.index)
        return list(self.replicas.order_by("index"))

    def replica_indexes(self) -> list[int]:
        """The replicas that have nodes, in order (0 for a lane of one engine)."""
        if "members" in getattr(self, "_prefetched_objects_cache", {}):
            return sorted({m.replica for m in self.members.all()})
        return sorted(set(self.members.values_list("replica", flat=True)))

    def replica_port(self, replica: int = 0) -> int:
        for row in self.replica_rows():
            if row.index == replica:
                return row.api_port or self.api_port
        return self.api_port

    def ranked_nodes(self, replica: int = 0) -> list[Node]:
        # A list of lanes loads members__node once (selectors); a single lane asks for its own.
        if "members" in getattr(self, "_prefetched_objects_cache", {}):
            members = sorted((m for m in self.members.all() if m.replica == replica), key=lambda m: m.rank)
        else:
            members = list(self.members.filter(replica=replica).select_related("node").order_by("rank"))
        return [member.node for member in members]

    def base_url(self, replica: int = 0) -> str:
        """The lane's OpenAI-compatible endpoint: vLLM's API on the head node."""
        head = self.ranked_nodes(replica)[0]
        return f"http://{head.address}:{self.replica_port(replica)}"

    @property
    def current_context_limit(self) -> int:
        if self.observed_state == LaneState.DEGRADED:
            return min(self.degraded_context_limit or DEFAULT_DEGRADED_CONTEXT_LIMIT, self.max_model_len)
        return self.max_model_len


class LaneReplica(models.Model):
    """One engine of a lane (seed 002's dual replicas, seed 003's fleet): its own ranked
    nodes (LaneNode.replica), launch plan, observed state and health. The lane's own
    observed state is the summary of its replicas' (lanes.lane_states)."""

    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="replicas")
    index = models.PositiveIntegerField()
    # Empty: the lane's API port. Two replicas on one host (sparksim) need their own.
    api_port = models.PositiveIntegerField(null=True, blank=True, validators=PORT)
    observed_state = models.CharField(max_length=16, choices=LaneState.choices, default=LaneState.STOPPED)
    state_changed_at = models.DateTimeField(null=True, blank=True)
    state_reason = models.CharField(max_length=500, blank=True, default="")
    health_failures = models.PositiveIntegerField(default=0)
    health_checked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["lane", "index"]
        constraints = [models.UniqueConstraint(fields=["lane", "index"], name="lane_replica_unique")]

    def __str__(self) -> str:
        return f"{self.lane_id}:{self.index}"


class LaneNode(models.Model):
    """Ordered lane membership: rank 0 is the head of its replica (LaneReplica.index)."""

    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="members")
    node = models.ForeignKey(Node, on_delete=models.PROTECT, related_name="memberships")
    replica = models.PositiveIntegerField(default=0)
    rank = models.PositiveIntegerField()

    class Meta:
        ordering = ["lane", "replica", "rank"]
        constraints = [
            models.UniqueConstraint(fields=["lane", "replica", "rank"], name="lane_replica_rank_unique"),
            models.UniqueConstraint(fields=["lane", "node"], name="lane_node_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.lane_id}:{self.replica}:{self.rank}"


class LaneRevision(models.Model):
    """Immutable snapshot of a lane's configuration; a launch records the one it ran."""

    lane = models.ForeignKey(Lane, on_delete=models.CASCADE, related_name="revisions")
    number = models.PositiveIntegerField()
    config = models.JSONField()
    created_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["lane", "-number"]
        constraints = [models.UniqueConstraint(fields=["lane", "number"], name="lane_revision_unique")]

    def __str__(self) -> str:
        return f"{self.lane.name} r{self.number}"

    def save(self, *args: Any, **kwargs: Any) -> None:
        if self.pk is not None:
            raise ValueError("Lane revisions are immutable")
        super().save(*args, **kwargs)

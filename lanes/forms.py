"""Node and lane forms. They only turn text into values; the services apply the lane rules
and their messages come back onto the fields (`apply_service_errors`), so a page shows
exactly what the API answers."""

from __future__ import annotations

import json
import shlex
from typing import Any

from django import forms
from django.core.exceptions import ValidationError

from core.forms import style_widgets as core_style_widgets
from core.validators import whole_number
from lanes.memory import parse_memory_bytes
from lanes.models import Executor, Lane, NodeState, SchedulingPolicy, Transport
from lanes.plan_shell import human_bytes
from lanes.selectors import lane_config

TRI_STATE = [("", "vLLM default"), ("true", "on"), ("false", "off")]


# Django's default labels read "Gpu memory utilization", "Memory gib", "Ssh port".
LABELS = {
    "ssh_port": "SSH port", "ssh_user": "SSH user", "ssh_private_key": "SSH private key",
    "ssh_host_key": "SSH host key", "sim_dir": "sparksim directory", "memory_gib": "Memory (GiB)",
    "os_reserve_gib": "OS reserve (GiB)", "model_id": "Model id", "tensor_parallel_size": "Tensor-parallel size",
    "api_port": "API port", "max_model_len": "max_model_len", "kv_cache_memory_bytes": "kv_cache_memory_bytes",
    "gpu_memory_utilization": "gpu_memory_utilization", "max_num_seqs": "max_num_seqs", "scheduling_policy": "scheduling_policy",
    "max_num_batched_tokens": "max_num_batched_tokens", "kv_cache_dtype": "kv_cache_dtype",
    "enable_prefix_caching": "enable_prefix_caching", "enable_chunked_prefill": "enable_chunked_prefill",
    "speculative_config": "speculative_config", "max_cudagraph_capture_size": "max_cudagraph_capture_size",
    "weights_gib": "Weights (GiB)", "kv_bytes_per_token": "KV bytes per token",
    "runtime_overhead_gib": "Runtime overhead (GiB)",
}


def style_widgets(form: forms.Form) -> None:
    for name, field in form.fields.items():
        if name in LABELS and field.label is None:  # vLLM settings keep vLLM's names, as the rules quote them
            field.label = LABELS[name]
    core_style_widgets(form)


def apply_service_errors(form: forms.Form, error: ValidationError) -> None:
    """Put each rule's message next to its field (or on top when the form has no such field)."""
    for field, messages in error.message_dict.items():
        for message in messages:
            form.add_error(field if field in form.fields else None, message)


class SecretTextarea(forms.Textarea):
    """A textarea that never renders its value: a form shown again after an error (a
    duplicate name, say) must not echo a pasted private key or secret back into the page."""

    def format_value(self, value: Any) -> str | None:  # noqa: ARG002 (Django's widget hook)
        return None


class NodeForm(forms.Form):
    name = forms.SlugField(max_length=63, help_text="A slug: spark1, spark-a.")
    address = forms.CharField(max_length=253, help_text="Management address or host name (SSH, API endpoint).")
    transport = forms.ChoiceField(choices=Transport.choices)
    ssh_port = forms.IntegerField(initial=22)
    ssh_user = forms.CharField(max_length=64, initial="spark")
    ssh_private_key = forms.CharField(
        required=False, strip=False, widget=SecretTextarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="Stored encrypted; never shown again (paste it again if the form reports an error). "
                  "Leave empty to keep the current key.",
    )
    clear_private_key = forms.BooleanField(required=False, label="Remove the stored private key")
    transfer_key = forms.CharField(
        required=False, strip=False, widget=SecretTextarea(attrs={"rows": 3, "autocomplete": "off"}),
        help_text="The private key this node uses to copy model files and images to the other nodes "
                  "(docs/guide-admin.md, model files). Stored encrypted; never shown again. "
                  "Leave empty to keep the current key.",
    )
    clear_transfer_key = forms.BooleanField(required=False, label="Remove the stored transfer key")
    ssh_host_key = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}),
        help_text="The node's public host key line (ssh-keyscan or /etc/ssh/ssh_host_ed25519_key.pub): pinned.",
    )
    runtime_command = forms.CharField(max_length=200, initial="docker")
    sim_dir = forms.CharField(max_length=500, required=False, help_text="sparksim node directory (simulated nodes).")
    memory_gib = forms.FloatField(initial=128)
    os_reserve_gib = forms.FloatField(initial=8, help_text="Kept free for the OS in the budget.")
    labels = forms.CharField(required=False, help_text="Comma-separated.")
    state = forms.ChoiceField(choices=NodeState.choices, initial=NodeState.UNKNOWN)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        style_widgets(self)

    def clean_labels(self) -> list[str]:
        return [label.strip() for label in self.cleaned_data["labels"].split(",") if label.strip()]

    def service_data(self) -> tuple[dict[str, Any], str | None, bool]:
        data = dict(self.cleaned_data)
        private_key = data.pop("ssh_private_key") or None
        clear = data.pop("clear_private_key", False)
        return data, private_key, clear


class LaneForm(forms.Form):
    name = forms.SlugField(max_length=63)
    model_id = forms.CharField(max_length=200, help_text="Hugging Face id, e.g. deepseek-ai/DeepSeek-V4-Flash-0731.")
    model_revision = forms.CharField(max_length=100, required=False)
    served_model_name = forms.CharField(max_length=200, required=False, help_text="Defaults to the lane name.")
    image = forms.CharField(max_length=300, help_text="Pinned by digest: repo@sha256:…")
    nodes = forms.CharField(help_text="In rank order: the first is the head (rank 0). Replica 0's with several replicas.")
    replicas = forms.CharField(
        required=False, widget=forms.Textarea(attrs={"rows": 2}), label="More replicas",
        help_text="Replicas 1, 2, …: one per line, its nodes in rank order (same TP), optionally its own "
                  "API port: 'spark3, spark4 port=8001'. The gateway balances a lane's replicas.")
    tensor_parallel_size = forms.IntegerField(initial=1)
    executor = forms.ChoiceField(choices=Executor.choices)
    api_port = forms.IntegerField(initial=8000)
    master_port = forms.IntegerField(initial=29501, help_text="Ray port or --master-port.")
    container_name = forms.SlugField(max_length=63, initial="vllm_node")
    max_model_len = forms.CharField(max_length=32, help_text="Pinned, in tokens (no 'auto').")
    kv_cache_memory_bytes = forms.CharField(required=False, help_text="Fixed KV cache per node, e.g. 11G.")
    gpu_memory_utilization = forms.FloatField(required=False, help_text="Ignored by vLLM when the KV size is fixed.")
    max_num_seqs = forms.IntegerField(required=False)
    max_num_batched_tokens = forms.IntegerField(required=False)
    scheduling_policy = forms.TypedChoiceField(choices=SchedulingPolicy.choices, initial=SchedulingPolicy.FCFS,
                                               required=False, empty_value=SchedulingPolicy.FCFS,
                                               help_text="vLLM's --scheduling-policy. priority: the gateway ranks "
                                                         "each request by its key's class and fair share.")
    kv_cache_dtype = forms.CharField(max_length=32, required=False)
    enable_prefix_caching = forms.TypedChoiceField(choices=TRI_STATE, required=False, coerce=lambda v: v == "true",
                                                   empty_value=None)
    enable_chunked_prefill = forms.TypedChoiceField(choices=TRI_STATE, required=False, coerce=lambda v: v == "true",
                                                    empty_value=None)
    speculative_config = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 2}),
                                         help_text='JSON, e.g. {"method":"dspark","num_speculative_tokens":3}.')
    max_cudagraph_capture_size = forms.IntegerField(required=False)
    extra_args = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                                 help_text="More vLLM flags, written as on a command line (quotes work).")
    container_env = forms.CharField(required=False, widget=forms.Textarea(attrs={"rows": 3}),
                                    help_text="NAME=value, one per line; set on the container. Names ending in "
                                              "_TOKEN, _KEY, _SECRET or _PASSWORD are kept as secrets.")
    secret_env = forms.CharField(required=False, strip=False, widget=SecretTextarea(attrs={"rows": 2, "autocomplete": "off"}),
                                 label="Secret env",
                                 help_text="NAME=value sets or replaces a secret, NAME= clears it; stored encrypted, "
                                           "never shown again.")
    weights_gib = forms.FloatField(initial=0, help_text="All weights; each node holds weights/TP.")
    kv_bytes_per_token = forms.IntegerField(required=False, help_text="Per node (per TP rank).")
    runtime_overhead_gib = forms.FloatField(initial=6)
    fallback = forms.ChoiceField(required=False)
    degraded_context_limit = forms.IntegerField(required=False)
    gateway_slots = forms.IntegerField(required=False, label="Gateway slots per replica",
                                       help_text="Requests the gateway sends one replica at once; more wait in its "
                                                 "fair queue. Empty = max_num_seqs (none: not queued).")

    # The form's three parts: what a lane is, what it takes from each node's memory, the rest.
    GROUPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
        ("basic", "Basic", ("name", "model_id", "model_revision", "served_model_name", "image", "nodes",
                            "replicas", "tensor_parallel_size", "executor", "max_model_len", "fallback")),
        ("memory", "Memory", ("kv_cache_memory_bytes", "gpu_memory_utilization", "weights_gib",
                              "kv_bytes_per_token", "runtime_overhead_gib", "kv_cache_dtype")),
        ("advanced", "Advanced", ("api_port", "master_port", "container_name", "max_num_seqs",
                                  "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
                                  "max_cudagraph_capture_size", "speculative_config", "extra_args",
                                  "container_env", "secret_env", "degraded_context_limit",
                                  "gateway_slots", "scheduling_policy")),
    )

    def __init__(self, *args: Any, secrets_set: list[str] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # The edit form says which secrets the lane holds (their names, never a value).
        secret_env = self.fields["secret_env"]
        secret_env.help_text = f"{secret_env.help_text} Set now: {', '.join(sorted(secrets_set))}." if secrets_set \
            else f"{secret_env.help_text} None is set."
        names = Lane.objects.order_by("name").values_list("name", flat=True)
        fallback = self.fields["fallback"]
        assert isinstance(fallback, forms.ChoiceField)
        fallback.choices = [("", "none"), *[(name, name) for name in names]]
        style_widgets(self)

    def clean_nodes(self) -> list[str]:
        return [name.strip() for name in self.cleaned_data["nodes"].replace("\n", ",").split(",") if name.strip()]

    def clean_replicas(self) -> list[dict[str, Any]]:
        replicas = []
        for number, line in enumerate(self.cleaned_data["replicas"].splitlines(), start=1):
            words = line.replace(",", " ").split()
            if not words:
                continue
            port: int | None = None
            nodes = []
            for word in words:
                if word.startswith("port="):
                    port = whole_number(word[5:], 65535)
                    if port is None or port < 1:
                        raise ValidationError(f"Line {number}: port= takes a port from 1 to 65,535.")
                else:
                    nodes.append(word)
            replicas.append({"nodes": nodes, "api_port": port})
        return replicas

    def clean_max_model_len(self) -> int | str:
        value = self.cleaned_data["max_model_len"].strip().replace(",", "").replace("_", "")
        # ASCII digits only: "²".isdigit() is true, and int() refuses it. Too large a number
        # gets the field's range; anything else, the rule's message.
        return int(value) if value.isascii() and value.isdigit() else value

    def clean_kv_cache_memory_bytes(self) -> int | None:
        try:
            return parse_memory_bytes(self.cleaned_data["kv_cache_memory_bytes"].strip())
        except ValueError as exc:
            raise ValidationError(str(exc)) from None

    def clean_speculative_config(self) -> Any:
        text = self.cleaned_data["speculative_config"].strip()
        if not text:
            return None
        try:
            return json.loads(text)
        except json.JSONDecodeError as exc:
            raise ValidationError(f"Not valid JSON: {exc.msg}.") from None

    def clean_extra_args(self) -> list[str]:
        try:
            return shlex.split(self.cleaned_data["extra_args"])
        except ValueError as exc:
            raise ValidationError(f"Cannot split into arguments: {exc}.") from None

    def clean_container_env(self) -> dict[str, str]:
        return _env_lines(self.cleaned_data["container_env"])

    def clean_secret_env(self) -> dict[str, str]:
        return _env_lines(self.cleaned_data["secret_env"])

    def clean_fallback(self) -> str | None:
        return self.cleaned_data["fallback"] or None

    def service_data(self, lane: Lane | None = None) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        """(the lane's fields, every replica); replica 0 keeps the API port it has."""
        data = dict(self.cleaned_data)
        nodes = data.pop("nodes")
        more = data.pop("replicas")
        for key in ("model_revision", "served_model_name", "kv_cache_dtype"):
            data[key] = data[key] or ""
        first_port = lane.replica_rows()[0].api_port if lane is not None and lane.replica_rows() else None
        return data, [{"nodes": nodes, "api_port": first_port}, *more]

    def valid_service_data(self, lane: Lane | None = None) -> tuple[dict[str, Any], list[dict[str, Any]] | None]:
        """service_data of a form with errors: its valid fields only (replicas None when the
        nodes or the more replicas failed), for the rules those decide (lane_rule_errors)."""
        data = {key: value for key, value in self.cleaned_data.items() if key not in self.errors}
        nodes, more = data.pop("nodes", None), data.pop("replicas", None)
        for key in ("model_revision", "served_model_name", "kv_cache_dtype"):
            if key in data:
                data[key] = data[key] or ""
        if nodes is None or more is None:
            return data, None
        first_port = lane.replica_rows()[0].api_port if lane is not None and lane.replica_rows() else None
        return data, [{"nodes": nodes, "api_port": first_port}, *more]

    @staticmethod
    def initial_for(lane: Lane) -> dict[str, Any]:
        config = lane_config(lane)
        initial = dict(config)
        initial["nodes"] = ", ".join(config["nodes"])
        initial["replicas"] = "\n".join(
            ", ".join(replica["nodes"]) + (f" port={replica['api_port']}" if replica.get("api_port") else "")
            for replica in (config.get("replicas") or [])[1:])
        initial["kv_cache_memory_bytes"] = _bytes_text(config["kv_cache_memory_bytes"])
        initial["speculative_config"] = json.dumps(config["speculative_config"]) if config["speculative_config"] else ""
        initial["extra_args"] = shlex.join(config["extra_args"] or [])
        initial["container_env"] = "\n".join(f"{k}={v}" for k, v in (lane.container_env or {}).items())
        for key in ("enable_prefix_caching", "enable_chunked_prefill"):
            initial[key] = "" if config[key] is None else ("true" if config[key] else "false")
        initial["fallback"] = config["fallback"] or ""
        return initial


def _env_lines(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        if "=" not in line:
            raise ValidationError(f"Line {number}: write NAME=value.")
        key, value = line.split("=", 1)
        env[key.strip()] = value.strip()
    return env


def _bytes_text(value: int | None) -> str:
    if not value:
        return ""
    return human_bytes(int(value))


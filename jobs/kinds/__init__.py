"""Job kinds: each is a function of the runner's context. Jobs' own kinds are registered
here; an app above jobs registers its own (jobs/registry.py)."""

from __future__ import annotations

from jobs.kinds.fabric import run_latency_matrix, run_link_bandwidth, run_nccl_test
from jobs.kinds.lane import run_launch, run_restart, run_status, run_stop
from jobs.kinds.network import run_network_check
from jobs.models import JobKind
from jobs.registry import register_kind
from jobs.weights.download import run_model_download
from jobs.weights.images import run_image_sync
from jobs.weights.params import MODEL_PARAMS, validate_model_params
from jobs.weights.scan import run_inventory
from jobs.weights.sync import run_model_sync


def register_jobs_kinds() -> None:
    register_kind(JobKind.NETWORK_CHECK, run_network_check)
    register_kind(JobKind.LAUNCH, run_launch)
    register_kind(JobKind.STOP, run_stop)
    register_kind(JobKind.RESTART, run_restart)
    register_kind(JobKind.STATUS, run_status)
    register_kind(JobKind.NCCL_TEST, run_nccl_test)
    register_kind(JobKind.LATENCY_MATRIX, run_latency_matrix)
    register_kind(JobKind.LINK_BANDWIDTH, run_link_bandwidth)
    register_kind(JobKind.INVENTORY, run_inventory)
    for kind, run in ((JobKind.MODEL_DOWNLOAD, run_model_download), (JobKind.MODEL_SYNC, run_model_sync),
                      (JobKind.IMAGE_SYNC, run_image_sync)):
        register_kind(kind, run, params=MODEL_PARAMS, validate=validate_model_params)

"""Job kinds: each is a function of the runner's context. Jobs' own kinds are registered
here; an app above jobs registers its own (jobs/registry.py)."""

from __future__ import annotations

from jobs.kinds.fabric import run_latency_matrix, run_link_bandwidth, run_nccl_test
from jobs.kinds.lane import run_launch, run_restart, run_status, run_stop
from jobs.kinds.network import run_network_check
from jobs.models import JobKind
from jobs.registry import register_kind


def register_jobs_kinds() -> None:
    register_kind(JobKind.NETWORK_CHECK, run_network_check)
    register_kind(JobKind.LAUNCH, run_launch)
    register_kind(JobKind.STOP, run_stop)
    register_kind(JobKind.RESTART, run_restart)
    register_kind(JobKind.STATUS, run_status)
    register_kind(JobKind.NCCL_TEST, run_nccl_test)
    register_kind(JobKind.LATENCY_MATRIX, run_latency_matrix)
    register_kind(JobKind.LINK_BANDWIDTH, run_link_bandwidth)

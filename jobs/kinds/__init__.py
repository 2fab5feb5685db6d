"""Job kinds: each is a function of the runner's context (DESIGN.md §7.3)."""

from __future__ import annotations

from jobs.kinds.fabric import run_latency_matrix, run_link_bandwidth, run_nccl_test
from jobs.kinds.lane import run_launch, run_restart, run_status, run_stop
from jobs.kinds.network import run_network_check
from jobs.models import JobKind
from jobs.runner import KindFunc

KINDS: dict[str, KindFunc] = {
    JobKind.NETWORK_CHECK: run_network_check,
    JobKind.LAUNCH: run_launch,
    JobKind.STOP: run_stop,
    JobKind.RESTART: run_restart,
    JobKind.STATUS: run_status,
    JobKind.NCCL_TEST: run_nccl_test,
    JobKind.LATENCY_MATRIX: run_latency_matrix,
    JobKind.LINK_BANDWIDTH: run_link_bandwidth,
}

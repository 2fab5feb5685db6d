"""The jobs tests' simulated cluster (a launched lane on sparksim nodes) for the guardian's tests."""

from tests.jobs.conftest import _no_celery_dispatch, dispatched, local_cluster, make_lane, sim_root

__all__ = ["_no_celery_dispatch", "dispatched", "local_cluster", "make_lane", "sim_root"]

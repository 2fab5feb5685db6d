"""Status reconciliation and job parameters, without a database."""

from __future__ import annotations

import pytest
from django.core.exceptions import ValidationError

from jobs.kinds.lane import reconcile_lane_state
from jobs.params import validate_params

RUNNING = "running 2026-11-29T18:00:00Z"


@pytest.mark.parametrize("containers, alive, healthy, current, expected", [
    ({"spark1": RUNNING, "spark2": RUNNING}, True, True, "failed", "serving"),
    ({"spark1": RUNNING}, True, True, "degraded", "degraded"),
    ({"spark1": "", "spark2": ""}, False, False, "serving", "stopped"),
    ({"spark1": RUNNING}, True, False, "starting", "starting"),
    ({"spark1": RUNNING}, True, False, "stopped", "failed"),
    ({"spark1": "exited 2026-11-29T18:00:00Z"}, False, False, "serving", "failed"),
    ({"spark1": RUNNING, "spark2": ""}, True, True, "serving", "failed"),
])
def test_reconcile_lane_state(containers, alive, healthy, current, expected):
    assert reconcile_lane_state(containers, alive, healthy, current)[0] == expected


def test_params_get_a_time_limit_that_covers_the_health_wait(settings):
    settings.JOBS_DEFAULT_TIME_LIMIT_S = 900
    assert validate_params("launch", {"wait_timeout_s": 100})["time_limit_s"] == 1000
    assert validate_params("status", {})["time_limit_s"] == 900


def test_bad_params_name_the_field_and_the_rule():
    with pytest.raises(ValidationError) as info:
        validate_params("status", {"wait_timeout_s": 5, "time_limit_s": "soon", "x": 1})
    assert info.value.message_dict == {
        "wait_timeout_s": ["does not apply to a status job"],
        "time_limit_s": ["must be a number of seconds"],
        "x": ["unknown parameter"],
    }
    with pytest.raises(ValidationError) as info:
        validate_params("explode", {})
    assert "kind" in info.value.message_dict

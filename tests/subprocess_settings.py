"""Settings of a portal process a test starts (uvicorn workers): portal.settings, then the
internal constants (portal.tuning) the test sets, as JSON in TEST_SETTINGS_JSON — they are not
environment variables, so a subprocess cannot get them the way the settings fixture sets them.

    env = {**os.environ, **subprocess_settings(GATEWAY_BREAKER_FAILURES=1)}
"""

from __future__ import annotations

import json
import os
from typing import Any

from portal.settings import *  # noqa: F403

globals().update(json.loads(os.environ.get("TEST_SETTINGS_JSON", "{}")))


def subprocess_settings(**values: Any) -> dict[str, str]:
    """The environment that makes a started portal process use these settings on top of portal.settings."""
    return {"DJANGO_SETTINGS_MODULE": "tests.subprocess_settings", "TEST_SETTINGS_JSON": json.dumps(values)}

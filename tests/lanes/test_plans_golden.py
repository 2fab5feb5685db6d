"""Golden launch/stop/status plans for the seeds' real lanes: read each file next to
docs/runtime-contract.md. Regenerate with UPDATE_GOLDEN=1 after a deliberate change."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lanes.plans import render_launch_plan, render_status_plan, render_stop_plan
from tests.lanes import seed_configs as seeds

GOLDEN = Path(__file__).parent / "golden"

CASES: dict[str, tuple[Callable[[], dict[str, Any]], list[str] | None]] = {
    "deepseek-ray-2x": (seeds.deepseek_ray, None),
    "deepseek-tp4-native-4x": (seeds.deepseek_tp4_native, ["rocep1s0f0"]),
    "qwen-single": (seeds.qwen_single, ["rocep1s0f0", "roceP2p1s0f0"]),
}
RENDERERS = {"launch": render_launch_plan, "stop": render_stop_plan, "status": render_status_plan}


@pytest.mark.parametrize("action", list(RENDERERS))
@pytest.mark.parametrize("case", list(CASES))
def test_plan_matches_golden_file(case: str, action: str) -> None:
    make_config, hca = CASES[case]
    config = make_config()
    plan = RENDERERS[action](config, seeds.targets(config["nodes"], hca))
    text = plan.render()
    path = GOLDEN / f"{case}.{action}.txt"
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert path.exists(), f"missing golden file {path.name}: run with UPDATE_GOLDEN=1"
    assert text == path.read_text()

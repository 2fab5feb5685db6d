"""The demo data: three simulated Sparks and seed 000's two lanes, once."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from lanes.demo import seed_demo
from lanes.models import Lane, Node
from lanes.selectors import lane_check, lane_plan

pytestmark = pytest.mark.django_db


def test_seed_demo_registers_three_sparks_and_the_two_seed_lanes_once(settings, tmp_path):
    settings.SIM_ROOT = tmp_path / "sim"
    seed_demo(io.StringIO())
    nodes = {node.name: node for node in Node.objects.all()}
    assert sorted(nodes) == ["spark1", "spark2", "spark3"]
    assert [nodes[n].address for n in sorted(nodes)] == ["127.0.0.11", "127.0.0.12", "127.0.0.13"]
    for node in nodes.values():
        assert node.transport == "local" and json.loads((Path(node.sim_dir) / "node.json").read_text())["name"]
    deepseek, qwen = Lane.objects.get(name="deepseek"), Lane.objects.get(name="qwen")
    assert [n.name for n in deepseek.ranked_nodes()] == ["spark1", "spark2"] and deepseek.tensor_parallel_size == 2
    assert [n.name for n in qwen.ranked_nodes()] == ["spark3"]
    assert deepseek.fallback == qwen and deepseek.degraded_context_limit == 524288
    assert lane_check(deepseek).errors == [] and lane_check(qwen).errors == []
    assert lane_plan(deepseek).steps[-1].url == "http://127.0.0.11:8000/health"

    out = io.StringIO()
    seed_demo(out)  # idempotent
    assert Node.objects.count() == 3 and Lane.objects.count() == 2
    assert "already registered" in out.getvalue()


def test_seed_demo_recreates_missing_cluster_directories(settings, tmp_path):
    settings.SIM_ROOT = tmp_path / "sim"
    seed_demo(io.StringIO())
    import shutil

    shutil.rmtree(tmp_path / "sim")
    seed_demo(io.StringIO())
    assert (tmp_path / "sim" / "spark2" / "bin" / "docker").exists()

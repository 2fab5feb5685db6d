"""One run, the same lane directly and through the gateway: both measured level by level,
the gateway's added TTFT reported, and the run's own API key gone when it ends."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User

from benchmarks.selectors import export_json, run_payload
from gateway.models import ApiKey, RequestLog
from jobs.models import JobState
from lanes.models import Lane
from tests.benchmarks.conftest import start_and_run
from tests.conftest import AsgiServer, wait_for


def test_direct_and_gateway_in_one_run(asgi_server: AsgiServer, bench_lane: Lane, admin_user: User,
                                       dispatched: list[int], settings: Any) -> None:
    settings.GATEWAY_URL = asgi_server.url
    run = start_and_run(bench_lane, admin_user, dispatched, concurrency=[1, 2], targets=["direct", "gateway"],
                        prompt_tokens=100, output_tokens=8)
    assert run.job.state == JobState.SUCCEEDED, run.job.error
    payload = run_payload(run)
    assert [(level["target"], level["label"]) for level in payload["levels"]] == [
        ("direct", "C=1"), ("gateway", "C=1"), ("direct", "C=2"), ("gateway", "C=2")]
    assert all(level["stats"]["completed"] == level["concurrency"] for level in payload["levels"])
    added = {row["label"]: row for row in payload["gateway_added"]}
    assert set(added) == {"C=1", "C=2"}
    for row in added.values():
        gateway = next(level["stats"] for level in payload["levels"]
                       if level["target"] == "gateway" and level["label"] == row["label"])
        direct = next(level["stats"] for level in payload["levels"]
                      if level["target"] == "direct" and level["label"] == row["label"])
        assert row["added_median_ttft_ms"] == gateway["median_ttft_ms"] - direct["median_ttft_ms"]
    assert export_json(run)["gateway_added"] == payload["gateway_added"]
    # The gateway requests really went through the gateway, under the run's own key, which
    # is revoked now; its secret never reached the job's log.
    key = ApiKey.objects.get(name=f"benchmark job #{run.job_id}")
    assert key.revoked_at is not None
    # Three measured requests, and the one-token path check before the first level: the
    # run's new key is looked up then, not inside level 1's TTFT.
    wait_for(lambda: RequestLog.objects.filter(key=key).count() == 4, timeout=15,
             what="the gateway's request log")
    assert RequestLog.objects.filter(key=key, completion_tokens=1).count() == 1
    log = "\n".join(run.job.log_lines.values_list("text", flat=True))
    for target in ("direct", "gateway"):
        assert f"path check ({target}, one token, not measured): first token in" in log
    assert f"{key.prefix}…" in log
    assert not [word for word in log.split() if word.startswith(key.prefix) and len(word) > len(key.prefix) + 1]

"""The RDMA watchdog: a rising round trip between a two-node lane's Sparks (measured with
ib_send_lat over real SSH against sparksim nodes) puts the lane in degraded mode; the
gateway then refuses a 600K-token prompt with context_length_exceeded naming the degraded
limit, and takes it again once the watchdog saw the link recover (with hysteresis)."""

from __future__ import annotations

import httpx
import pytest

from core.models import AuditEvent
from gateway.services import api_key_create
from jobs.fabric.watchdog import watchdog_check_lane, watchdog_step, watchdog_tick
from jobs.models import LaneWatchdog
from lanes.models import Lane, LaneState
from tests.conftest import SIM_DEEPSEEK, wait_for
from tests.jobs.conftest import call_in_thread, checked, create_lane, fault

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(("samples", "sample", "degraded", "expected"), [
    ([6.0, 6.0], 30.0, False, (14.0, True, "degrade")),       # the average, not one spike, crosses 12
    ([6.0, 6.0], 20.0, False, (10.67, False, "")),
    ([20.0, 20.0], 10.0, True, (16.67, True, "")),
    ([14.0, 6.0], 11.0, True, (10.33, True, "")),             # under 12 but above 9.6: still degraded
    ([6.0, 6.0], 9.0, True, (7.0, False, "recover")),
])
def test_moving_average_with_hysteresis(samples, sample, degraded, expected) -> None:
    step = watchdog_step(samples=samples, sample=sample, window=3, threshold=12.0, recover_below=None,
                         degraded=degraded)
    assert (round(step.average, 2), step.degraded, step.transition) == expected


def test_the_window_keeps_only_the_last_samples() -> None:
    step = watchdog_step(samples=[50.0, 6.0, 6.0], sample=6.0, window=3, threshold=12.0, recover_below=10.0,
                         degraded=True)
    assert step.samples == [6.0, 6.0, 6.0] and step.transition == "recover"


def chat(url: str, secret: str, content: str) -> httpx.Response:
    return httpx.post(f"{url}/v1/chat/completions", headers={"authorization": f"Bearer {secret}"}, timeout=120,
                      json={"model": "deepseek", "max_tokens": 16, "messages": [{"role": "user", "content": content}]})


def test_rising_rtt_degrades_the_lane_gateway_holds_512k_then_recovers(
    ssh_cluster, admin_user, asgi_server, engine_factory
) -> None:
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    engine = engine_factory(SIM_DEEPSEEK, "--max-model-len", "1048576", "--served-model-name", "deepseek",
                            host=nodes[0].address, time_scale=0.0001)
    lane = create_lane("deepseek", nodes, api_port=engine.port, max_model_len=1_048_576)
    Lane.objects.filter(pk=lane.pk).update(max_model_len=1_048_576, observed_state=LaneState.SERVING,
                                           served_model_name="deepseek")
    LaneWatchdog.objects.create(lane=lane, window=3)  # threshold 12 us and recovery below 9.6 us: the defaults
    secret = api_key_create(actor=admin_user, name="agent").secret
    prompt = "word " * 600_000  # 600K tokens: fits 1M, not the degraded 524,288

    healthy = call_in_thread(watchdog_tick)
    assert healthy["deepseek"].endswith(" us") and float(healthy["deepseek"].split()[0]) < 9
    # The link gets worse: every measurement from spark1 sees 8 us more round trip.
    fault(ssh_cluster, "spark1", "rtt-rise", "8")
    for _ in range(4):
        if call_in_thread(watchdog_tick)["deepseek"] == "degrade":
            break
    lane.refresh_from_db()
    assert lane.observed_state == LaneState.DEGRADED
    watchdog = LaneWatchdog.objects.get(lane=lane)
    assert watchdog.degraded and watchdog.average_us > 12

    refused = wait_for(lambda: (r := chat(asgi_server.url, secret, prompt)).status_code == 400 and r,
                       timeout=30, what="the gateway to see the degraded lane")
    error = refused.json()["error"]
    assert error["code"] == "context_length_exceeded"
    assert "maximum context length is 524288 tokens (degraded mode" in error["message"]
    assert not [item for item in httpx.get(f"{engine.url}/_sim/requests").json()
                if item["path"] == "/v1/chat/completions"]  # refused before sending

    fault(ssh_cluster, "spark1", "clear")
    still = call_in_thread(watchdog_tick)["deepseek"]
    assert still != "recover" and Lane.objects.get(pk=lane.pk).observed_state == LaneState.DEGRADED
    for _ in range(4):
        if call_in_thread(watchdog_tick)["deepseek"] == "recover":
            break
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING

    accepted = wait_for(lambda: (r := chat(asgi_server.url, secret, prompt)).status_code == 200 and r,
                        timeout=60, what="the gateway to take the long prompt again")
    assert accepted.json()["usage"]["prompt_tokens"] > 600_000
    # lane.state events (the state history every change writes) sit between them
    actions = list(AuditEvent.objects.filter(object_id=str(lane.pk), action__startswith="lane.")
                   .exclude(action="lane.state").order_by("id").values_list("action", flat=True))
    assert actions[-2:] == ["lane.degraded", "lane.recovered"]
    states = [diff["observed_state"] for diff in AuditEvent.objects.filter(
        object_id=str(lane.pk), action="lane.state").order_by("id").values_list("diff", flat=True)]
    assert states[-2:] == [["serving", "degraded"], ["degraded", "serving"]]


def test_a_lane_that_opted_out_is_never_degraded(ssh_cluster, admin_user) -> None:
    nodes = [ssh_cluster.node("spark1"), ssh_cluster.node("spark2")]
    lane = create_lane("deepseek", nodes)
    Lane.objects.filter(pk=lane.pk).update(observed_state=LaneState.SERVING)
    LaneWatchdog.objects.create(lane=lane, enabled=False, window=1)
    assert watchdog_check_lane(lane=lane, sample_us=50.0) is None
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING
    assert call_in_thread(watchdog_tick) == {"deepseek": "skipped"}


def test_a_failed_measurement_keeps_the_state_and_says_why(ssh_cluster, admin_user) -> None:
    nodes = checked(ssh_cluster, admin_user, ["spark1", "spark2"])
    lane = create_lane("deepseek", nodes)
    Lane.objects.filter(pk=lane.pk).update(observed_state=LaneState.SERVING)
    fault(ssh_cluster, "spark2", "tool-missing", "ib_send_lat")
    assert call_in_thread(watchdog_tick) == {"deepseek": "skipped"}
    watchdog = LaneWatchdog.objects.get(lane=lane)
    assert "ib_send_lat" in watchdog.last_error and watchdog.samples == []
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.SERVING


def test_a_relaunched_lane_is_judged_afresh(ssh_cluster, admin_user) -> None:
    lane = create_lane("deepseek", [ssh_cluster.node("spark1"), ssh_cluster.node("spark2")])
    Lane.objects.filter(pk=lane.pk).update(observed_state=LaneState.SERVING)
    lane.refresh_from_db()
    LaneWatchdog.objects.create(lane=lane, window=2)
    assert call_in_thread(lambda: watchdog_check_lane(lane=lane, sample_us=30.0)).transition == "degrade"
    # A launch set it serving again while the watchdog still remembered it degraded.
    Lane.objects.filter(pk=lane.pk).update(observed_state=LaneState.SERVING)
    lane.refresh_from_db()
    step = call_in_thread(lambda: watchdog_check_lane(lane=lane, sample_us=20.0))
    assert step.transition == "degrade" and step.samples == [20.0]
    assert Lane.objects.get(pk=lane.pk).observed_state == LaneState.DEGRADED

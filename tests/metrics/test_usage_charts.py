"""Usage over time (metrics.usage): the charts' series per team, key, lane and model in hour
and day buckets, latency percentiles, the cost model and its rule, who may see whose usage."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.models import AuditEvent
from gateway.models import ApiKey, RequestLog
from gateway.team_services import team_create
from lanes.models import Lane, Node
from metrics.models import CostModel
from metrics.storage import usage_rollup
from metrics.usage import UsageQuery, cost_model_set, usage_series

pytestmark = pytest.mark.django_db
NOW = datetime(2026, 3, 4, 12, 30, tzinfo=UTC)


def lane_on(name: str, nodes: int, model: str = "") -> Lane:
    lane = Lane.objects.create(name=name, model_id=f"org/{name}", image="x@sha256:" + "0" * 64, max_model_len=4096,
                               served_model_name=model)
    for rank in range(nodes):
        node, _ = Node.objects.get_or_create(name=f"spark{rank}", defaults={"address": f"127.0.0.{rank + 10}",
                                                                           "transport": "local"})
        lane.members.create(node=node, rank=rank)
    return lane


def log(at: datetime, key: ApiKey | None, lane: str, latency: float, *, status: int = 200, prompt: int = 100,
        completion: int = 10) -> None:
    RequestLog.objects.create(created_at=at, request_id=f"req-{RequestLog.objects.count()}", key=key,
                              endpoint="chat.completions", lane=lane, status=status, prompt_tokens=prompt,
                              completion_tokens=completion, latency_ms=latency)


@pytest.fixture
def usage(admin_user: User, lead_user: User) -> dict[str, ApiKey]:
    """Two teams' keys on a 3-node lane, one hour apart; the lead is in team "agents" only."""
    lane_on("qwen", 3, model="qwen3-coder")
    agents = team_create(actor=admin_user, name="agents", allowed_lanes=[], members=[lead_user.username])
    ops = team_create(actor=admin_user, name="ops", allowed_lanes=[], members=[])
    coder = ApiKey.objects.create(name="coder", prefix="sk-spark-c1", secret_hash="c" * 64, team=agents)
    cron = ApiKey.objects.create(name="cron", prefix="sk-spark-c2", secret_hash="d" * 64, team=ops)
    hour = NOW.replace(minute=0) - timedelta(hours=1)  # 11:00, a whole hour
    for latency in (100.0, 200.0, 300.0):  # coder: 600 ms of the lane's 800 ms in 11:00
        log(hour + timedelta(minutes=5), coder, "qwen", latency)
    log(hour + timedelta(minutes=6), cron, "qwen", 200.0, status=502, prompt=7, completion=0)
    log(NOW - timedelta(minutes=10), coder, "qwen", 4000.0)  # 12:20, in the current hour
    usage_rollup(now=NOW, hours_back=2)
    return {"coder": coder, "cron": cron}


def test_hour_buckets_per_key_count_requests_and_tokens_apart_and_price_each_lane_hour(usage) -> None:
    CostModel.objects.create(pk=1, node_hour_amortization=0.5, watts_per_node=500, price_per_kwh=1.0)  # 1.0/node-hour
    body = usage_series(UsageQuery(bucket="hour", by="key", days=1), now=NOW)
    assert body["times"][-2:] == [datetime(2026, 3, 4, 11, tzinfo=UTC), datetime(2026, 3, 4, 12, tzinfo=UTC)]
    assert len(body["times"]) == 24
    series = {s["name"]: s for s in body["series"]}
    assert series["coder"]["requests"][-2:] == [3, 1] and series["cron"]["requests"][-2:] == [1, 0]
    assert series["coder"]["prompt_tokens"][-2] == 300 and series["coder"]["completion_tokens"][-2] == 30
    assert series["cron"]["errors"][-2] == 1
    # 11:00: the lane's 3 node-hours (3.0) split by latency: coder 600 of 800 ms, cron 200.
    assert series["coder"]["cost"][-2] == pytest.approx(2.25) and series["cron"]["cost"][-2] == pytest.approx(0.75)
    # 12:00 is half gone: coder, alone on the lane, pays the half hour's 1.5.
    assert series["coder"]["cost"][-1] == pytest.approx(1.5)
    top = {row["name"]: row for row in body["top"]}
    assert [row["name"] for row in body["top"]] == ["coder", "cron"]
    assert top["coder"]["cost"] == pytest.approx(3.75) and top["coder"]["cost_per_request"] == pytest.approx(0.9375)
    assert 100 <= top["coder"]["latency_p50_ms"] <= 300 and top["coder"]["latency_p95_ms"] == pytest.approx(4000)
    # 23.5 h of 3 nodes in range (from 13:00 yesterday, the first of the 24 buckets), 1.5 h of them used.
    assert body["idle_cost"] == pytest.approx(3.0 * 22.0)


def test_day_buckets_per_team_lane_and_model(usage) -> None:
    by_team = usage_series(UsageQuery(bucket="day", by="team", days=7), now=NOW)
    assert len(by_team["times"]) == 7 and by_team["times"][-1] == datetime(2026, 3, 4, tzinfo=UTC)
    assert {s["name"]: s["requests"][-1] for s in by_team["series"]} == {"agents": 4, "ops": 1}
    assert {r["name"] for r in usage_series(UsageQuery(bucket="day", by="lane", days=7), now=NOW)["top"]} == {"qwen"}
    by_key = {r["name"]: r for r in usage_series(UsageQuery(bucket="day", by="key", days=7), now=NOW)["top"]}
    # The daily rollup gives the same cost and percentiles as the hours it sums.
    assert by_key["coder"]["cost"] == pytest.approx(3.75 * CostModel().node_hour)
    assert by_key["coder"]["latency_p95_ms"] == pytest.approx(4000) and by_key["cron"]["errors"] == 1
    model = usage_series(UsageQuery(bucket="day", by="model", days=7), now=NOW)["top"]
    assert [(r["name"], r["requests"]) for r in model] == [("qwen3-coder", 5)]


@pytest.fixture
def two_days(admin_user: User) -> dict[str, ApiKey]:
    """36 hours of traffic on two lanes from three keys in two teams, a request every 20
    minutes of varied latency, status and tokens, rolled up as beat does (the last hours) and
    the older hours before: the 6-hour tier is summed from the hours it holds."""
    lane_on("qwen", 3, model="qwen3-coder")
    lane_on("tiny", 1)
    agents = team_create(actor=admin_user, name="agents", allowed_lanes=[], members=[])
    ops = team_create(actor=admin_user, name="ops", allowed_lanes=[], members=[])
    keys = [ApiKey.objects.create(name=name, prefix=f"sk-spark-t{i}", secret_hash=str(i) * 64, team=team)
            for i, (name, team) in enumerate((("coder", agents), ("tester", agents), ("cron", ops)))]
    first = NOW - timedelta(hours=36)
    for i in range(36 * 3):
        log(first + timedelta(minutes=20 * i), keys[i % 3], ("qwen", "tiny")[i % 2], 80.0 + (i * 397) % 9000,
            status=502 if i % 11 == 0 else 200, prompt=100 + i, completion=i % 7)
    usage_rollup(now=NOW, hours_back=37)
    return {key.name: key for key in keys}


def summed_hours(hourly: dict, start: datetime, measure: str) -> dict[str, float]:
    """Per series, `measure` summed over the hour buckets of [start, start + 6 h)."""
    hours = [i for i, t in enumerate(hourly["times"]) if start <= t < start + timedelta(hours=6)]
    return {s["name"]: sum(s[measure][i] for i in hours) for s in hourly["series"]}


@pytest.mark.parametrize("by", ["key", "team", "lane", "model"])
def test_the_6_hour_tier_gives_the_chart_summed_from_the_hours(two_days, by: str) -> None:
    """Every 6-hour bucket is the sum of its six hour buckets (requests, errors, tokens,
    cost), and the range's top consumers are the same, percentiles included (the same
    histograms, summed)."""
    CostModel.objects.create(pk=1, node_hour_amortization=0.5, watts_per_node=500, price_per_kwh=1.0)
    hourly = usage_series(UsageQuery(bucket="hour", by=by, days=2), now=NOW)
    six = usage_series(UsageQuery(bucket="6h", by=by, days=2), now=NOW)
    assert six["bucket"] == "6h" and six["times"][-1] == datetime(2026, 3, 4, 12, tzinfo=UTC)
    assert all((t.hour % 6, t.minute) == (0, 0) for t in six["times"]) and len(six["times"]) == 8
    assert {s["name"] for s in six["series"]} == {s["name"] for s in hourly["series"]}
    assert {"key": {"coder", "tester", "cron"}, "team": {"agents", "ops"}, "lane": {"qwen", "tiny"},
            "model": {"qwen3-coder", "tiny"}}[by] == {s["name"] for s in six["series"]}
    filled = 0
    for i, start in enumerate(six["times"]):
        for measure in ("requests", "errors", "prompt_tokens", "completion_tokens", "cost"):
            expected = summed_hours(hourly, start, measure)
            got = {s["name"]: s[measure][i] for s in six["series"]}
            assert got == pytest.approx(expected), (start, measure)
        filled += sum(s["requests"][i] for s in six["series"]) > 0
    assert filled == 7  # 36 hours of traffic from 00:30 two days ago: the last seven buckets
    # The traffic is all inside both ranges: the same top consumers, to the percentile.
    assert [row["name"] for row in six["top"]] == [row["name"] for row in hourly["top"]]
    for mine, theirs in zip(six["top"], hourly["top"], strict=True):
        assert mine == pytest.approx(theirs), mine["name"]
    assert sum(row["requests"] for row in six["top"]) == 108


def test_a_late_request_updates_the_hour_the_6_hours_and_the_day(two_days) -> None:
    """A request written late (its batch after the hour's rollup) into the previous hour is
    counted by the next rollup in every tier."""
    at = NOW.replace(minute=0) - timedelta(minutes=30)  # 11:30, in the 6 hours from 06:00
    before = {bucket: usage_series(UsageQuery(bucket=bucket, by="key", days=1), now=NOW)
              for bucket in ("hour", "6h", "day")}
    log(at, two_days["cron"], "tiny", 60_000.0, prompt=5000, completion=50)
    usage_rollup(now=NOW)  # beat's run: the current and previous hours
    for bucket, index in (("hour", -2), ("6h", -2), ("day", -1)):
        after = usage_series(UsageQuery(bucket=bucket, by="key", days=1), now=NOW)
        old = {s["name"]: s for s in before[bucket]["series"]}["cron"]
        new = {s["name"]: s for s in after["series"]}["cron"]
        assert after["times"][index] <= at, bucket
        assert new["requests"][index] == old["requests"][index] + 1, bucket
        assert new["prompt_tokens"][index] == old["prompt_tokens"][index] + 5000, bucket
        # A minute of the lane: cron's share of the hour's lane cost grows.
        assert new["cost"][index] > old["cost"][index], bucket


def test_seed_000s_figures_give_a_thousandth_of_a_euro_a_request() -> None:
    """The defaults: 1,100 W for 3 Sparks at 0.25 €/kWh plus 0.11 €/node-hour; 14,500
    requests a day on 3 Sparks (docs/guide-admin.md shows the arithmetic)."""
    model = CostModel()
    day = 3 * 24 * model.node_hour
    assert model.watts_per_node * 3 == pytest.approx(1100, abs=0.2)
    assert day == pytest.approx(14.52, abs=0.01)
    assert day / 14_500 == pytest.approx(0.001, abs=0.00001)


def test_bad_usage_queries_name_the_field(admin_client: Client, usage) -> None:
    for query, field in (("bucket=minute", "bucket"), ("by=moon", "by"), ("bucket=hour&days=3", "days"),
                         ("bucket=6h&days=91", "days")):
        answer = admin_client.get(f"/api/usage/series?{query}")
        assert answer.status_code == 422, query
        assert field in json.dumps(answer.json()["detail"]), query
        page = admin_client.get(f"/monitor/usage/?{query.replace('by=', 'chart=')}")
        assert page.status_code == 400 and f"{field if field != 'by' else 'chart'}:" in page.content.decode()


def test_members_see_only_their_teams_usage_admins_all(role_clients: dict[str, Client], usage) -> None:
    everyone = role_clients["admin"].get("/api/usage/series?bucket=day&days=400&by=key").json()
    assert {row["name"] for row in everyone["top"]} == {"coder", "cron"}
    mine = role_clients["lead"].get("/api/usage/series?bucket=day&days=400&by=key").json()
    assert {row["name"] for row in mine["top"]} == {"coder"} and mine["idle_cost"] is None
    ops, agents = usage["cron"].team_id, usage["coder"].team_id
    assert f"/monitor/usage/?team={agents}&amp;bucket=hour" in role_clients["lead"].get(f"/teams/{agents}/").content.decode()
    assert role_clients["lead"].get(f"/api/usage/series?team={agents}").status_code == 200
    assert role_clients["lead"].get(f"/api/usage/series?team={ops}").status_code == 403
    assert role_clients["lead"].get(f"/monitor/usage/?team={ops}").status_code == 403
    page = role_clients["lead"].get("/monitor/usage/?bucket=day&days=400").content.decode()
    assert "coder" in page and "cron" not in page
    csv = b"".join(role_clients["lead"].get("/monitor/usage.csv?days=400").streaming_content).decode()
    assert "coder" in csv and "cron" not in csv
    # A viewer in no team reads no one's usage.
    nothing = role_clients["viewer"].get("/api/usage/series?bucket=day&days=400").json()
    assert nothing["top"] == [] and nothing["series"] == []
    for path in ("/api/usage/series", "/api/usage/cost-model"):
        assert role_clients["anonymous"].get(path).status_code == 401
        assert role_clients["outsider"].get(path).status_code == 403
    assert role_clients["outsider"].get("/monitor/usage/").status_code == 403
    assert role_clients["anonymous"].get("/monitor/usage/").status_code == 302


def test_admins_set_the_cost_model_validated_and_audited(role_clients: dict[str, Client], admin_user: User) -> None:
    answer = role_clients["admin"].patch("/api/usage/cost-model", {"price_per_kwh": 0.3},
                                         content_type="application/json")
    assert answer.status_code == 200 and answer.json()["price_per_kwh"] == 0.3
    assert answer.json()["node_hour"] == pytest.approx(0.11 + 0.3667 * 0.3, abs=0.0001)
    event = AuditEvent.objects.get(action="cost_model.set")
    assert event.diff["price_per_kwh"] == [0.25, 0.3]
    for body, field in (({"watts_per_node": -1}, "watts_per_node"), ({"currency": "euro"}, "currency"),
                        ({"node_hour_amortization": 1e9}, "node_hour_amortization"), ({"colour": 1}, "colour")):
        refused = role_clients["admin"].patch("/api/usage/cost-model", body, content_type="application/json")
        assert refused.status_code == 422 and field in json.dumps(refused.json()["detail"]), body
    assert CostModel.objects.get().price_per_kwh == 0.3  # nothing of the refused changes saved
    for who in ("lead", "viewer"):
        assert role_clients[who].patch("/api/usage/cost-model", {"price_per_kwh": 9},
                                       content_type="application/json").status_code == 403
    assert role_clients["viewer"].get("/api/usage/cost-model").json()["price_per_kwh"] == 0.3
    with pytest.raises(Exception, match="price_per_kwh"):
        cost_model_set(actor=admin_user, price_per_kwh=float("nan"))


def test_an_admin_sets_the_cost_model_on_the_usage_page(role_clients: dict[str, Client]) -> None:
    page = role_clients["admin"].get("/monitor/usage/").content.decode()
    assert 'id="cost-model-form"' in page and 'value="366.7"' in page
    assert 'id="cost-model-form"' not in role_clients["lead"].get("/monitor/usage/").content.decode()
    form = {"currency": "EUR", "node_hour_amortization": "0.2", "watts_per_node": "400", "price_per_kwh": "0.5"}
    assert role_clients["admin"].post("/monitor/usage/cost", form).status_code == 302
    assert CostModel.objects.get().node_hour == pytest.approx(0.4)
    assert AuditEvent.objects.filter(action="cost_model.set").count() == 1
    refused = role_clients["admin"].post("/monitor/usage/cost", {**form, "watts_per_node": "-3", "currency": "eu"})
    assert refused.status_code == 400
    assert refused.context["form"].errors["watts_per_node"] and refused.context["form"].errors["currency"]
    assert CostModel.objects.get().watts_per_node == 400
    assert role_clients["lead"].post("/monitor/usage/cost", form).status_code == 403
    assert role_clients["anonymous"].post("/monitor/usage/cost", form).status_code == 302

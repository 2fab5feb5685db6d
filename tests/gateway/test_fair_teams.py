"""Team weights on a full lane (gateway.fair.flow_of, gateway.fair_lua): a team's keys share
the team's weight (weighted inside it by their own), behind two real uvicorn workers; admins
set a team's weight on the API and the page, validated and audited."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor

import pytest
from django.contrib.auth.models import User
from django.test import Client

from core.models import AuditEvent
from gateway.models import ApiKey, Team
from gateway.team_services import team_create
from sparksim.standalone import EngineHandle
from tests.conftest import WorkerProcesses
from tests.gateway.conftest import create_key, set_engine_faults
from tests.gateway.test_fair import engine, fair_lane, flood_until, pool

pytestmark = pytest.mark.django_db(transaction=True)
__all__ = ["engine", "pool"]  # the fixtures


def test_team_weights_two_to_one_share_a_full_lane_two_to_one_and_its_keys_share_the_teams(
    engine: EngineHandle, worker_processes: Callable[..., WorkerProcesses], key_owner: User,
    pool: ThreadPoolExecutor,
) -> None:
    fair_lane(engine, slots=2)
    heavy = team_create(actor=key_owner, name="heavy", fair_weight=2)
    light = team_create(actor=key_owner, name="light")
    secrets = {}
    for name, team in (("H1", heavy), ("H2", heavy), ("L", light)):
        secrets[name], key_id = create_key(key_owner, name=name)
        ApiKey.objects.filter(pk=key_id).update(team=team)
    workers = worker_processes(2)
    set_engine_faults(engine, latency_s=0.12)  # the lane, not the test's clients, is the bottleneck
    done = flood_until(pool, workers.urls, secrets, per_key=16, total=300)
    teams = (done["H1"] + done["H2"]) / done["L"]
    assert 1.8 <= teams <= 2.2, done  # the teams' weights, though the heavy team sends twice as many
    assert 0.75 <= done["H1"] / done["H2"] <= 1.33, done  # its keys (weights 1 and 1) share its part


def test_admins_set_a_teams_weight_validated_and_audited(admin_client: Client, admin_user: User,
                                                          role_clients: dict[str, Client]) -> None:
    created = admin_client.post("/api/gateway/teams", {"name": "agents", "fair_weight": 3},
                                content_type="application/json")
    assert created.status_code == 201 and created.json()["fair_weight"] == 3
    team_id = created.json()["id"]
    for bad in (0, -1, 70000):
        answer = admin_client.patch(f"/api/gateway/teams/{team_id}", {"fair_weight": bad},
                                    content_type="application/json")
        assert answer.status_code == 422 and "fair_weight" in str(answer.json()["detail"]), answer.content
    assert Team.objects.get(pk=team_id).fair_weight == 3  # nothing saved
    changed = admin_client.patch(f"/api/gateway/teams/{team_id}", {"fair_weight": 2}, content_type="application/json")
    assert changed.status_code == 200 and changed.json()["fair_weight"] == 2
    event = AuditEvent.objects.get(action="team.update", object_id=str(team_id))
    assert event.diff["fair_weight"] == [3, 2]
    # The page: an admin changes it; a bad one is refused naming the field; a viewer may not.
    assert admin_client.post(f"/teams/{team_id}/", {"name": "agents", "fair_weight": 5}).status_code == 302
    assert Team.objects.get(pk=team_id).fair_weight == 5
    refused = admin_client.post(f"/teams/{team_id}/", {"name": "agents", "fair_weight": 0})
    assert refused.status_code == 400 and "greater than or equal to 1" in refused.content.decode()
    viewer = role_clients["viewer"]
    assert viewer.post(f"/teams/{team_id}/", {"name": "agents", "fair_weight": 9}).status_code in (403, 404)
    assert viewer.patch(f"/api/gateway/teams/{team_id}", {"fair_weight": 9},
                        content_type="application/json").status_code == 403
    assert Team.objects.get(pk=team_id).fair_weight == 5


def test_inside_a_team_its_keys_take_the_teams_turns_by_their_own_weights() -> None:
    """The fair queue's own scripts on one slot: a team's keys of weights 2 and 1, six queued
    each, get the team's turns 2:1 (in Redis alone: the order is exact)."""
    import redis
    from django.conf import settings

    from gateway.fair_lua import GIVE_LUA, TAKE_LUA
    from lanes.replica_health import fair_keys

    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = fair_keys("teamlane", 0)
    client.delete(*keys, *client.keys(f"{keys[0]}:*"))

    def take(rid: str, key: str, weight: int) -> int:
        reply = client.eval(TAKE_LUA, len(keys), *keys, rid, "t1", 1, "i", 1, 60_000, 100, "nobody", 60_000,
                            30_000, 0, 10_000, 0, key, weight)
        return int(reply[0])

    assert take("first", "k0", 1) == 1  # the slot, held
    for n in range(6):
        assert take(f"a{n}", "k1", 2) == 0 and take(f"b{n}", "k2", 1) == 0
    order, holder = [], "first"
    for _ in range(6):
        client.eval(GIVE_LUA, len(keys), *keys, holder, 1, 60_000, 30_000, 10, 0, 10_000)
        holder = client.zrange(keys[0], 0, -1)[0].decode()
        order.append(holder[0])
    assert order.count("a") == 4 and order.count("b") == 2, order  # 2:1
    client.delete(*keys, *client.keys(f"{keys[0]}:*"))

"""The fair queue's order, on its own Redis scripts (gateway.fair_lua) with no gateway in
front: the order is exact. Shares count work (slot time), not requests, and are decided when
a slot frees, so a key of short requests sent often stays ahead of a flooder's long streams,
and weights hold while the slot times are still guessed."""

from __future__ import annotations

from collections import Counter

import redis
from django.conf import settings

from gateway.fair_lua import GIVE_LUA, TAKE_LUA
from lanes.replica_health import fair_keys


def test_a_key_of_short_requests_sent_often_stays_ahead_of_a_flooders_long_streams() -> None:
    """The fair queue's own scripts on two slots, no headroom: a flooder's 8 s streams and an
    agent that sends two 80 ms requests each time one of them ends. By count the agent asks for
    more turns than the flooder is given (counted by requests, it would fall behind the
    flooder's queue from the second round); by work it is light, so both of its requests go
    before the flooder's next, every round."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = fair_keys("worklane", 0)
    client.delete(*keys)

    def take(rid: str, flow: str) -> int:
        return int(client.eval(TAKE_LUA, len(keys), *keys, rid, flow, 1, "i", 2, 60_000, 100, "nobody", 60_000,
                               30_000, 0, 10_000, 0, "", 0)[0])

    def free(rid: str, held_ms: int) -> str:
        """Gives `rid`'s slot back after `held_ms`; the request it went to."""
        before = {m.decode() for m in client.zrange(keys[0], 0, -1)} - {rid}
        client.eval(GIVE_LUA, len(keys), *keys, rid, 2, 60_000, 30_000, held_ms, 0, 10_000)
        (granted,) = {m.decode() for m in client.zrange(keys[0], 0, -1)} - before
        return str(granted)

    assert take("b00", "kB") == 1 and take("b01", "kB") == 1
    assert all(take(f"b{n:02}", "kB") == 0 for n in range(2, 30))
    streams = ["b00", "b01"]
    for r in range(8):
        assert take(f"a{r}x", "kA") == 0 and take(f"a{r}y", "kA") == 0  # the lane is full
        first = free(streams.pop(0), 8000)  # a stream ends
        second = free(first, 80)
        after = free(second, 80)
        assert (first, second) == (f"a{r}x", f"a{r}y") and after.startswith("b"), (r, first, second, after)
        streams.append(after)
    client.delete(*keys)


def test_weights_hold_from_the_first_request_while_the_work_is_still_guessed() -> None:
    """The scripts on two slots: keys of weights 2 and 1 keep 16 requests each queued (closed
    loop), every one holding its slot 150 ms, so the first ones are charged the default guess
    (1 s) until slot times are known. Charges set right later must not leave the queued
    requests ordered by the old guess (a flow's order is decided when a slot frees, from its
    count then): the first 240 turns go 2:1."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    keys = fair_keys("guesslane", 0)
    client.delete(*keys)
    weights, sent, held, done = {"H": 2, "L": 1}, Counter[str](), [], Counter[str]()

    def take(flow: str) -> None:
        sent[flow] += 1
        rid = f"{flow}{sent[flow]:04}"
        if int(client.eval(TAKE_LUA, len(keys), *keys, rid, flow, weights[flow], "i", 2, 600_000, 1000, "nobody",
                           600_000, 30_000, 0, 10_000, 0, "", 0)[0]) == 1:
            held.append(rid)

    for flow in weights:
        for _ in range(16):
            take(flow)
    for _ in range(240):
        rid = held.pop(0)
        before = {m.decode() for m in client.zrange(keys[0], 0, -1)} - {rid}
        client.eval(GIVE_LUA, len(keys), *keys, rid, 2, 600_000, 30_000, 150, 0, 10_000)
        held.extend(sorted({m.decode() for m in client.zrange(keys[0], 0, -1)} - before))
        done[rid[0]] += 1
        take(rid[0])
    assert 1.8 <= done["H"] / done["L"] <= 2.2, done
    client.delete(*keys)

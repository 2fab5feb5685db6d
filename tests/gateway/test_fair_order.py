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


class Replica:
    """One replica's fair queue driven through its scripts: two slots, no headroom, interactive
    requests of keys of no team (the queues' leases and bounds far off)."""

    def __init__(self, lane: str) -> None:
        self.client = redis.Redis.from_url(settings.REDIS_URL)
        self.keys = fair_keys(lane, 0)
        self.clear()

    def clear(self) -> None:  # the replica's keys and its queues' (under the slots key)
        self.client.delete(*self.keys, *self.client.keys(f"{self.keys[0]}:*"))

    def held(self) -> set[str]:
        return {m.decode() for m in self.client.zrange(self.keys[0], 0, -1)}

    def take(self, rid: str, flow: str, weight: int = 1) -> int:
        """GRANTED 1 or QUEUED 0."""
        return int(self.client.eval(TAKE_LUA, len(self.keys), *self.keys, rid, flow, weight, "i", 2, 600_000, 1000,
                                    "nobody", 600_000, 30_000, 0, 10_000, 0, "", 0)[0])

    def give(self, rid: str, held_ms: int) -> list[str]:
        """`rid`'s slot given back after `held_ms`: the requests it went to."""
        before = self.held() - {rid}
        self.client.eval(GIVE_LUA, len(self.keys), *self.keys, rid, 2, 600_000, 30_000, held_ms, 0, 10_000)
        return sorted(self.held() - before)


def test_a_key_of_short_requests_sent_often_stays_ahead_of_a_flooders_long_streams() -> None:
    """The fair queue's own scripts on two slots, no headroom: a flooder's 8 s streams and an
    agent that sends two 80 ms requests each time one of them ends. By count the agent asks for
    more turns than the flooder is given (counted by requests, it would fall behind the
    flooder's queue from the second round); by work it is light, so both of its requests go
    before the flooder's next, every round."""
    replica = Replica("worklane")
    take = replica.take

    def free(rid: str, held_ms: int) -> str:
        (granted,) = replica.give(rid, held_ms)
        return granted

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
    replica.clear()


def test_weights_hold_from_the_first_request_while_the_work_is_still_guessed() -> None:
    """The scripts on two slots: keys of weights 2 and 1 keep 16 requests each queued (closed
    loop), every one holding its slot 150 ms, so the first ones are charged the default guess
    (1 s) until slot times are known. Charges set right later must not leave the queued
    requests ordered by the old guess (a flow's order is decided when a slot frees, from its
    count then): the first 240 turns go 2:1."""
    replica = Replica("guesslane")
    weights, sent, held, done = {"H": 2, "L": 1}, Counter[str](), [], Counter[str]()

    def take(flow: str) -> None:
        sent[flow] += 1
        rid = f"{flow}{sent[flow]:04}"
        if replica.take(rid, flow, weights[flow]) == 1:
            held.append(rid)

    for flow in weights:
        for _ in range(16):
            take(flow)
    for _ in range(240):
        rid = held.pop(0)
        held.extend(replica.give(rid, 150))
        done[rid[0]] += 1
        take(rid[0])
    assert 1.8 <= done["H"] / done["L"] <= 2.2, done
    replica.clear()

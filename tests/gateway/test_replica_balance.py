"""Balancing a lane's replicas, without processes: the conversation's identity, the
consistent (rendezvous) hash and its load bound (gateway.replicas)."""

from __future__ import annotations

from collections import Counter

from gateway.directory import ReplicaInfo
from gateway.replicas import affinity_key, balance, hash_order

SYSTEM = "You are a careful coding assistant working in a large repository."
REPLICAS = tuple(ReplicaInfo(index, f"http://r{index}", "serving") for index in range(3))


def home(key: bytes, replicas: tuple[ReplicaInfo, ...] = REPLICAS, load: dict[int, int] | None = None) -> int:
    return balance("qwen", replicas, key, load or {}, factor=1.25, slack=2)[0].index


def test_the_affinity_key_is_the_conversation_not_its_latest_turn() -> None:
    opening = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Refactor billing."}]
    later = [*opening, {"role": "assistant", "content": "Done."}, {"role": "user", "content": "Now tests."}]
    assert affinity_key({"messages": opening}) == affinity_key({"messages": later})
    other = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Refactor shipping."}]
    assert affinity_key({"messages": opening}) != affinity_key({"messages": other})
    assert affinity_key({"prompt": "Once upon a time"}) == b"Once upon a time"
    assert affinity_key({"prompt": ""}) is None and affinity_key({"messages": "nope"}) is None


def test_a_replica_leaving_moves_only_its_own_conversations() -> None:
    keys = [f"conversation {n}".encode() for n in range(300)]
    homes = {key: home(key) for key in keys}
    assert set(Counter(homes.values())) == {0, 1, 2}
    survivors = (REPLICAS[0], REPLICAS[2])
    for key in keys:
        if homes[key] != 1:
            assert home(key, survivors) == homes[key]


def test_a_hot_conversation_past_the_load_bound_spills_to_its_next_replica() -> None:
    key = b"conversation 7"
    first, second, third = (r.index for r in hash_order(key, "qwen", REPLICAS))
    assert home(key) == first
    assert home(key, load={first: 12, second: 9, third: 0}) == second  # bound: ceil(1.25 × 22 / 3) + 2 = 12
    assert home(key, load={first: 20, second: 20, third: 0}) == third
    assert home(key, load={first: 2}) == first  # a little extra load is not overload (slack)
    # No conversation to keep: least outstanding first.
    assert [r.index for r in balance("qwen", REPLICAS, None, {0: 3, 1: 0, 2: 1}, factor=1.25, slack=2)] == [1, 2, 0]

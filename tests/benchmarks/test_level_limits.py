"""A level's client holds as many connections as the level has streams: httpx's default pool
(100) would queue the rest inside the client, and their wait would read as the lane's TTFT."""

from __future__ import annotations

from benchmarks.kind import level_limits
from benchmarks.params import Level


def test_a_concurrency_level_gets_one_connection_per_stream_past_httpxs_default() -> None:
    limits = level_limits(Level(position=0, target="direct", concurrency=300, request_rate=None))
    assert (limits.max_connections, limits.max_keepalive_connections) == (300, 300)


def test_a_request_rate_level_is_not_capped() -> None:
    limits = level_limits(Level(position=0, target="gateway", concurrency=None, request_rate=50.0))
    assert limits.max_connections is None

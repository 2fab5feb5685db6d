"""A level's client holds as many connections as the level has streams: httpx's default pool
(100) would queue the rest inside the client, and their wait would read as the lane's TTFT."""

from __future__ import annotations

from benchmarks.loadgen import level_limits


def test_a_concurrency_level_gets_one_connection_per_stream_past_httpxs_default() -> None:
    limits = level_limits(300)
    assert (limits.max_connections, limits.max_keepalive_connections) == (300, 300)


def test_a_request_rate_level_is_not_capped() -> None:
    limits = level_limits(None)
    assert limits.max_connections is None

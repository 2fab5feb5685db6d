"""Limit math and the circuit breaker, without Redis or a clock."""

from __future__ import annotations

from gateway.breaker import CircuitBreaker
from gateway.limits import seconds_until_below, sliding_count


def test_the_sliding_window_weighs_the_previous_minute_by_its_overlap() -> None:
    assert sliding_count(previous=60, current=10, elapsed_in_window=30) == 40
    assert sliding_count(previous=60, current=10, elapsed_in_window=60) == 10


def test_retry_after_is_when_the_previous_minute_has_faded_enough() -> None:
    # limit 50: 60 * (1 - t/60) + 10 + 1 <= 50  →  t >= 21 s into the window; we are at 15 s.
    assert round(seconds_until_below(50, previous=60, current=10, elapsed_in_window=15), 6) == 6.0
    assert seconds_until_below(50, previous=0, current=10, elapsed_in_window=15) == 0.0
    # The current minute alone is full: at the next one it still weighs 10*(1 - t/60), so
    # one more fits only 6 s into it: 45 + 6.
    assert round(seconds_until_below(10, previous=0, current=10, elapsed_in_window=15), 6) == 51.0


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_the_breaker_opens_after_consecutive_failures_and_probes_once_after_the_cooldown() -> None:
    clock = Clock()
    breaker = CircuitBreaker(failures_to_open=3, cooldown_s=10, clock=clock)
    for _ in range(2):
        breaker.record_failure()
    assert breaker.allows()
    breaker.record_failure()
    assert not breaker.allows() and breaker.state == "open"
    clock.now = 11
    assert breaker.allows()  # the probe
    assert not breaker.allows()  # only one probe at a time
    breaker.record_failure()  # the probe failed: open again
    assert not breaker.allows()
    clock.now = 22
    assert breaker.allows()
    breaker.record_success()
    assert breaker.allows() and breaker.state == "closed"


def test_a_success_resets_the_failure_count() -> None:
    breaker = CircuitBreaker(failures_to_open=2, cooldown_s=10, clock=Clock())
    breaker.record_failure()
    breaker.record_success()
    breaker.record_failure()
    assert breaker.allows()


def count_after(limit_window: float, previous: float, current: float, elapsed: float, wait: float) -> float:
    """The script's sliding count `wait` seconds later, with nothing else admitted meanwhile."""
    at = elapsed + wait
    if at >= 2 * limit_window:
        return 0.0
    if at >= limit_window:
        return sliding_count(current, 0.0, at - limit_window, limit_window)
    return sliding_count(previous, current, at, limit_window)


def test_retry_after_is_never_shorter_than_the_real_wait() -> None:
    import random

    rng = random.Random(11)
    for _ in range(5000):
        limit = rng.randint(1, 100)
        previous, current = rng.randint(0, 2 * limit), rng.randint(0, 2 * limit)
        elapsed = rng.uniform(0, 59.999)
        wait = seconds_until_below(limit, previous, current, elapsed)
        assert count_after(60, previous, current, elapsed, wait + 1e-6) + 1 <= limit + 1e-6, (
            limit, previous, current, elapsed, wait)


def test_5xx_answers_open_the_breaker_only_across_keys() -> None:
    breaker = CircuitBreaker(failures_to_open=2, cooldown_s=10, clock=Clock())
    for _ in range(10):
        breaker.record_error_answer("key-x")
    assert breaker.allows() and breaker.state == "closed"
    breaker.record_error_answer("key-y")
    assert not breaker.allows() and breaker.state == "open"


def test_an_answer_that_never_came_is_evidence_whatever_the_key() -> None:
    breaker = CircuitBreaker(failures_to_open=2, cooldown_s=10, clock=Clock())
    breaker.record_error_answer("key-x")
    breaker.record_failure()
    assert not breaker.allows()
    breaker.record_success()
    assert breaker.allows() and not breaker.sources and not breaker.unanswered

"""Circuit breaker per lane replica, per process: after N consecutive failures that show the
lane itself is unhealthy, the replica is skipped for a cool-down, then one request probes it
(half-open). An open circuit means the request is provably not sent, so the gateway may
fail over to the lane's fallback.

What counts as evidence (gateway.relay judges each answer):
- a connection failure, a reset, a stream cut off, a timeout with no progress from the
  replica since the request was sent: the lane is not answering — always evidence;
- a 5xx *answer* to a fully validated body: the lane answered, and the body may be what it
  choked on (llama.cpp answers `"temperature": null` with a 500), so 5xx answers open the
  circuit only when they come from at least two different API keys. One key's bodies can
  never switch a lane off for everyone; a lane that 5xx-es every request of a lone key is
  the health watcher's to eject (its /health probe), not this breaker's;
- a timeout while the replica made progress on other requests (bytes arrived since this
  one was sent): a full lane where the request waited in the queue — overload, not
  failure; it counts neither way.
A failed half-open probe opens the circuit again, whatever its kind."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

# Distinct API keys whose 5xx answers, with nothing else, are evidence against the lane.
ERROR_ANSWER_SOURCES = 2


@dataclass
class CircuitBreaker:
    failures_to_open: int
    cooldown_s: float
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None
    probing: bool = field(default=False)
    unanswered: bool = False  # a failure of this run was no answer at all (not an error answer)
    sources: set[str] = field(default_factory=set)  # the keys whose 5xx answers are in this run

    def allows(self) -> bool:
        if self.opened_at is None:
            return True
        if self.clock() - self.opened_at < self.cooldown_s or self.probing:
            return False
        self.probing = True  # half-open: this one request probes the lane
        return True

    def record_success(self) -> None:
        self.failures = 0
        self.opened_at = None
        self.probing = False
        self.unanswered = False
        self.sources.clear()

    def record_failure(self) -> None:
        """No answer at all: a connection failure, a reset, a cut-off or a stalled lane."""
        self.unanswered = True
        self._count()

    def record_error_answer(self, source: str) -> None:
        """A 5xx answer to a validated body, from the API key `source`."""
        self.sources.add(source)
        self._count()

    def _count(self) -> None:
        self.failures += 1
        evidence = self.unanswered or len(self.sources) >= ERROR_ANSWER_SOURCES
        if self.probing or (self.failures >= self.failures_to_open and evidence):
            self.opened_at = self.clock()
        self.probing = False

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half-open" if self.clock() - self.opened_at >= self.cooldown_s else "open"

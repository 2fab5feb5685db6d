"""Circuit breaker per lane, per process: after N consecutive upstream failures the lane
is skipped for a cool-down, then one request probes it (half-open). An open circuit means
the request is provably not sent, so the gateway may fail over to the lane's fallback."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


@dataclass
class CircuitBreaker:
    failures_to_open: int
    cooldown_s: float
    clock: Callable[[], float] = time.monotonic
    failures: int = 0
    opened_at: float | None = None
    probing: bool = field(default=False)

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

    def record_failure(self) -> None:
        self.failures += 1
        if self.probing or self.failures >= self.failures_to_open:
            self.opened_at = self.clock()
        self.probing = False

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        return "half-open" if self.clock() - self.opened_at >= self.cooldown_s else "open"

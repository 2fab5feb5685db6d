"""The pace at which one web process reads large request bodies.

Every byte of a large body passes through the process's event loop: read from the
client, written into shared memory, sent on to the lane. Three clients posting 8 MB bodies
back to back made that ~160 MB/s, and the small requests of every other client waited
behind it (their p99 went from ~4 to 13-17 ms with the lanes and clients on other cores).
So the bytes of large bodies share a budget, PORTAL_GATEWAY_LARGE_BODY_BYTES_PER_S: past
it, the body's reader waits before asking for its next chunk, the server stops reading
that socket, and TCP holds the client back. Nothing is refused and nothing is buffered
beyond what the server already holds.

Up to one second of the budget may be spent at once, so a body that comes alone is read
as fast as it arrives; only a sustained flow is paced. The budget is far above what a
lane consumes: a 150K-token prompt is ~0.6 MB and takes a Spark tens of seconds to prefill,
so even a default of 32 MiB/s is dozens of such prompts a second.

The pace is a virtual clock (GCRA): `paid_until` is when the bytes read so far are paid
for at the rate; it never lags the present by more than the burst, and a reader waits
until it has caught up. Bodies read at once share the rate in turn."""

from __future__ import annotations

import asyncio
import time

BURST_S = 1.0


class BytePace:
    def __init__(self) -> None:
        self.paid_until = 0.0

    def delay(self, size: int, rate: float, now: float | None = None) -> float:
        """Seconds the reader of `size` more bytes waits at `rate` bytes a second (0: unpaced)."""
        if rate <= 0:
            return 0.0
        now = time.monotonic() if now is None else now
        self.paid_until = max(self.paid_until, now - BURST_S) + size / rate
        return max(0.0, self.paid_until - now)

    async def spend(self, size: int, rate: float) -> None:
        wait = self.delay(size, rate)
        if wait > 0:
            await asyncio.sleep(wait)


PACE = BytePace()

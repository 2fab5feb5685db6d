"""An asyncio event loop on a simulated clock: when nothing is ready, the clock jumps to the
next timer instead of waiting for it. The engine core reads time only through its loop
(loop.time(), asyncio.sleep, call_at), so under this loop its timing can be checked exactly,
whatever the machine's load. For in-process use without sockets (tests of the core)."""

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _JumpingSelector(selectors.DefaultSelector):
    def __init__(self, loop: "VirtualClockLoop") -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:  # no timer pending: only I/O (a thread's wake-up) can help
            return super().select(None)
        ready = super().select(0)
        if not ready and timeout > 0:
            self._loop.now += timeout
        return ready


class VirtualClockLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now = 0.0
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now


def run_on_virtual_clock(main: Coroutine[Any, Any, T]) -> T:
    """asyncio.run(main) with simulated time starting at 0."""
    loop = VirtualClockLoop()
    try:
        return loop.run_until_complete(main)
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()

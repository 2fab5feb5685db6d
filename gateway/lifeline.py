"""Worker processes that never outlive the web process that started them.

A process pool's workers wait on their task queue, and every worker holds that queue's
write end too: when the web process dies without shutting the pool down (killed, or
stopped by a server that skips the ASGI lifespan), nothing ever wakes them and they stay
behind, orphaned. So each worker also holds the read end of a pipe whose only write end is
the web process's (`Lifeline`): the kernel closes it when the web process ends however it
ends, the read returns, and the worker exits.

An orderly stop (`stop_executor`) is bounded: queued work is cancelled, the workers get a
few seconds to finish what they hold, then they are killed; multiprocessing's resource
tracker, a child the spawn pool started, is stopped and reaped too (`stop_resource_tracker`).

No Django here: the worker processes import this module."""

from __future__ import annotations

import contextlib
import logging
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from multiprocessing import resource_tracker
from multiprocessing.connection import Connection

log = logging.getLogger(__name__)

# A bound on the web process's stop, not a tuning knob: an inspection takes tens of ms.
STOP_TIMEOUT_S = 5.0


class Lifeline:
    """The pipe: the workers get `reader` (passed to them at spawn); the write end stays
    in this process alone (spawn passes a child only the descriptors it is given)."""

    def __init__(self) -> None:
        self.reader, self._writer = multiprocessing.get_context("spawn").Pipe(duplex=False)

    def cut(self) -> None:
        """End it now: every worker still holding the reader exits."""
        self._writer.close()
        self.reader.close()


def worker_start(niceness: int, lifeline: Connection) -> None:
    """A worker process's initializer: it yields the CPU to the web processes (a small
    request's few hundred microseconds come before a large body's tens of milliseconds of
    parsing), and it ends when the web process does."""
    os.nice(niceness)
    threading.Thread(target=_end_with_parent, args=(lifeline,), name="gateway-lifeline", daemon=True).start()


def _end_with_parent(lifeline: Connection) -> None:
    with contextlib.suppress(EOFError, OSError):
        lifeline.recv()  # nothing is ever sent: this returns when the web process's end closes
    os._exit(0)


def stop_executor(executor: ProcessPoolExecutor, timeout: float = STOP_TIMEOUT_S) -> None:
    """Shut the pool down and wait for its workers to exit, at most `timeout` seconds before
    they are killed. The executor's own thread joins them (a second waiter on the same
    child would race it), so the wait runs in a helper thread that is itself bounded."""
    processes = list((getattr(executor, "_processes", None) or {}).values())  # no public handle on them
    stopper = threading.Thread(target=executor.shutdown, kwargs={"wait": True, "cancel_futures": True},
                               name="gateway-large-stop", daemon=True)
    stopper.start()
    stopper.join(timeout)
    if stopper.is_alive():
        log.warning("gateway: large-body workers still busy after %.0f s; killing them", timeout)
        for process in processes:
            with contextlib.suppress(OSError, ValueError):
                process.kill()
        stopper.join(timeout)


def stop_resource_tracker() -> None:
    """Stop multiprocessing's resource tracker (it restarts if anything needs it again): it
    would exit on its own only after this process, reparented meanwhile."""
    stop = getattr(resource_tracker._resource_tracker, "_stop", None)  # no public way in 3.11
    if stop is not None:
        with contextlib.suppress(Exception):  # best effort: the process is stopping
            stop()

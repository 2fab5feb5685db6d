"""The shared-memory files large bodies are read into (gateway.large): a web process
writes a body there as it arrives, a worker process reads it by name, and the files are
recycled from body to body (SHARED_FILES). Also `busy_error`, the 503 of every large-body
bound: a full /dev/shm, the held bytes and the worker pool (gateway.large_pool)."""

from __future__ import annotations

import contextlib
import errno
import itertools
import logging
import os
import threading
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from gateway.lifeline import STOP_TIMEOUT_S
from gateway.pace import PACE
from gateway.wire import GatewayError

log = logging.getLogger(__name__)


class SharedBody:
    """A large body written into a shared-memory file that a worker process reads by name.

    The web process writes and reads it with pwrite/pread on its own descriptor, never a
    mapping: an 8 MB mapping cost the event loop ~1 ms to unmap, and another ~1.3 ms to free
    its pages, once per body. Nothing is reserved ahead of the bytes: a client that
    announces 16 MB and sends one byte holds one page, not 16 MB of the machine's memory
    (with pwrite a full /dev/shm is an error to answer, not a SIGBUS as in a mapping).

    The files are recycled (SHARED_FILES): creating and freeing an 8 MB file cost a helper
    thread ~3-4 ms of a core per body. A file goes back to the pool only when nothing refers
    to its body any more (weakref.finalize): every read goes through this object, so a
    recycled file can never be read for an earlier body. The worker reads only the body's
    `size` bytes; what lies beyond them is an earlier body's, in this process's own file
    (mode 0600)."""

    def __init__(self, file: SharedFile, size: int) -> None:
        self.file, self.size, self.path = file, size, file.path
        self.filled = 0
        weakref.finalize(self, SHARED_FILES.give_back, file)

    @classmethod
    def create(cls, size: int) -> SharedBody | None:
        """A SharedBody in a recycled file or a new one; None where there is no /dev/shm."""
        file = SHARED_FILES.take(size)
        if file is None:
            try:
                file = SharedFile.create()
            except OSError as exc:
                log.warning("gateway: a %d-byte body is read into the process instead of shared memory (%s)",
                            size, exc)
                return None
        return cls(file, size)

    def __len__(self) -> int:
        return self.size

    def write(self, chunk: bytes) -> None:
        end = self.filled + len(chunk)
        if end > self.size:
            raise ValueError("more bytes than announced")
        try:
            written = os.pwrite(self.file.fd, chunk, self.filled)
            if written != len(chunk):  # tmpfs writes all or fails
                raise OSError(errno.ENOSPC, "short write")
        except OSError as exc:  # /dev/shm is full
            log.warning("gateway: no room for a %d-byte body in %s (%s)", self.size, SHARED_DIR, exc)
            raise busy_error() from None
        self.filled = end
        self.file.high = max(self.file.high, end)

    def read(self, start: int, stop: int) -> bytes:
        return os.pread(self.file.fd, stop - start, start)


SHARED_DIR = "/dev/shm"  # a tmpfs: the body stays in memory, shared with the worker by name
SHARED_PREFIX = "spark-gw-"
SHARED_IDLE_MAX = 32 * 1024 * 1024  # bytes of idle files a web process keeps for the next bodies
_shared_count = itertools.count()


@dataclass(eq=False)  # one file is itself, whatever it holds (the pool removes it by identity)
class SharedFile:
    fd: int
    path: str
    high: int = 0  # the most bytes written into it: the memory it holds

    @classmethod
    def create(cls) -> SharedFile:
        path = os.path.join(SHARED_DIR, f"{SHARED_PREFIX}{os.getpid()}-{next(_shared_count)}")
        return cls(os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o600), path)

    def discard(self) -> None:
        """Remove it for good (closing the last descriptor of an unlinked file frees its
        pages: ~1.3 ms for 8 MB, so this runs in a helper thread)."""
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)
        os.close(self.fd)


class SharedFiles:
    """The idle shared-memory files of this web process, holding at most SHARED_IDLE_MAX
    bytes together; the rest are discarded in a helper thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # a body may be released on any thread (tests run several loops)
        self.idle: list[SharedFile] = []
        self._discarder = ThreadPoolExecutor(1, thread_name_prefix="gateway-shm-discard")
        self.closed = False

    def take(self, size: int) -> SharedFile | None:
        """The idle file that already holds the pages for `size` bytes with the fewest to
        spare, else the one that holds the most (it grows as the body is written)."""
        with self._lock:
            if not self.idle:
                return None
            fitting = [file for file in self.idle if file.high >= size]
            file = (min(fitting, key=lambda candidate: candidate.high) if fitting
                    else max(self.idle, key=lambda candidate: candidate.high))
            self.idle.remove(file)
            return file

    def give_back(self, file: SharedFile) -> None:
        with self._lock:
            if not self.closed and sum(idle.high for idle in self.idle) + file.high <= SHARED_IDLE_MAX:
                self.idle.append(file)
                return
        self._discard(file)

    def _discard(self, file: SharedFile) -> None:
        try:
            self._discarder.submit(file.discard)
        except RuntimeError:  # interpreter shutdown: the executor takes no more work
            file.discard()

    def clear(self) -> None:
        """Discard every idle file (the web process stops; tests)."""
        with self._lock:
            idle, self.idle = self.idle, []
        for file in idle:
            self._discard(file)

    def close(self, timeout: float = STOP_TIMEOUT_S) -> None:
        """The web process stops: every idle file is removed now, a body released later is
        removed then, and the removals already queued get `timeout` seconds (the process may
        end without running exit hooks: uvicorn re-raises SIGTERM)."""
        with self._lock:
            self.closed = True
            idle, self.idle = self.idle, []
        for file in idle:
            file.discard()
        with contextlib.suppress(RuntimeError, TimeoutError):
            self._discarder.submit(lambda: None).result(timeout)  # after every removal queued before it
        self._discarder.shutdown(wait=False)


SHARED_FILES = SharedFiles()


def sweep_shared_files() -> None:
    """Remove the shared-memory files of web processes that died before removing them."""
    with contextlib.suppress(OSError):
        for name in os.listdir(SHARED_DIR):
            if not name.startswith(SHARED_PREFIX):
                continue
            pid = name[len(SHARED_PREFIX):].partition("-")[0]
            if pid.isdigit() and not os.path.exists(f"/proc/{pid}"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(SHARED_DIR, name))


async def read_shared_body(receive: Callable[[], Awaitable[MutableMapping[str, Any]]], size: int, *,
                           rate: float) -> SharedBody | None:
    """A body that announced `size` bytes (over the large-body threshold), read into shared
    memory chunk by chunk as it arrives (no joined copy), at most `rate` bytes a second
    with the process's other large bodies (gateway.pace); None, before reading a
    byte, where there is no shared memory (then the caller reads it into the process)."""
    shared = SharedBody.create(size)
    if shared is None:
        return None
    try:
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                raise GatewayError(400, "The client went away before sending the whole body.",
                                   code="client_disconnected")
            body = message.get("body", b"")
            if body:
                if shared.filled + len(body) > size:  # the server frames the body by its length: cannot happen
                    raise GatewayError(400, "The body is longer than its content-length.", code="invalid_request")
                shared.write(body)
            if not message.get("more_body", False):
                PACE.delay(len(body), rate)  # charged (to the next large body), not waited for
                break
            await PACE.spend(len(body), rate)
        if shared.filled != size:
            raise GatewayError(400, "The body is shorter than its content-length.", code="invalid_request")
        return shared
    except BaseException:
        del shared  # its file goes back to the pool (what was written is never read)
        raise


def busy_error() -> GatewayError:
    return GatewayError(503, "The gateway is processing too many large request bodies; retry shortly.",
                        code="server_busy", type_="server_error", retry_after_s=1, retryable=True)

"""Large request bodies, kept off the web process's GIL.

orjson parses an 8 MB body in ~8 ms and writes it back in ~6 ms, holding the GIL all that
time even in a worker thread: every other request of the process waits for it. So a body
above portal.tuning.GATEWAY_LARGE_BODY_BYTES is parsed and validated (the same
`parse_request`, the same rules) in a small pool of worker processes, which send back
only what the web process needs: the body's outline (its small top-level members and the
shape of its messages), counts for the context guard, its digest, and where each
top-level member lies in the raw bytes. The body sent upstream is then the client's own
bytes with the few members the gateway changes (`model`, `max_tokens`, `stream_options`)
replaced in place (`LargeBody.forward`): a large body is never parsed nor re-serialised in
the web process, and everything else in it reaches the lane byte for byte.

Nor is it copied whole on the event loop. A body that announces its length is written,
as it arrives, into a shared-memory file (`SharedBody`, in /dev/shm, files recycled from
body to body): the worker reads it from there, so only its name crosses the pipe (an
8 MB body pickled into the pipe cost the web process ~3 ms of GIL each), and the body
sent upstream is a `StreamedBody` (gateway.body), slices read back from that file
with the edits in between, never one joined copy. Where there is no /dev/shm, or the
body came without a length, the bytes are read as before and pickled to the worker; a full
/dev/shm is 503 `server_busy`.
Large bodies are read at a bounded rate (gateway.pace).

The pool is bounded: portal.tuning.GATEWAY_LARGE_BODY_WORKERS bodies are inspected at once and
portal.tuning.GATEWAY_LARGE_BODY_QUEUE more may wait; beyond that a large body is refused with
503 and `retry-after`, so a flood of huge bodies cannot take the process's memory or
starve the small requests.

No Django here: the worker processes import this module alone."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import hashlib
import itertools
import logging
import multiprocessing
import os
import re
import threading
import weakref
from collections.abc import Awaitable, Callable, MutableMapping
from concurrent.futures import Future, ProcessPoolExecutor, ThreadPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.body import Piece, Raw, StreamedBody, edited
from gateway.lifeline import STOP_TIMEOUT_S, Lifeline, stop_executor, stop_resource_tracker, worker_start
from gateway.pace import PACE
from gateway.request import ParsedRequest, parse_request, prompt_text
from gateway.wire import GatewayError

log = logging.getLogger(__name__)

PROMPT_FIELDS = ("messages", "tools", "prompt")
# A top-level member larger than this (an engine extra carrying a blob) stays out of the outline.
OUTLINE_MEMBER_MAX = 64 * 1024
MODEL = None  # in an edit: "the lane's served model name", known only after routing

_WS = re.compile(rb"[ \t\n\r]*")
_STRUCTURE = re.compile(rb'[\[\]{}"]')
_SCALAR = re.compile(rb"[^,}\] \t\n\r]+")
_QUOTE, _BACKSLASH, _CLOSE_BRACE = 0x22, 0x5C, 0x7D
_OPEN, _CLOSE = frozenset(b"[{"), frozenset(b"]}")

Span = tuple[int, int]
Edit = tuple[int, int, bytes | None]  # replace raw[start:end] (an insertion when start == end)


@dataclass(frozen=True)
class Member:
    name: str
    key_start: int  # its name's opening quote
    start: int  # its value's first byte
    stop: int  # after its value's last byte


def member_places(raw: bytes) -> tuple[list[Member], int]:
    """Every top-level member of `raw`, a JSON object that orjson accepted, in order (a
    repeated name each time), and the offset of its closing brace. Strings are skipped
    with `bytes.find` (memchr), so an 8 MB prompt costs a few ms."""
    members: list[Member] = []
    pos = _skip_ws(raw, _skip_ws(raw, 0) + 1)  # past "{"
    if raw[pos] == _CLOSE_BRACE:
        return members, pos
    while True:
        key_start, key_end = pos, _string_end(raw, pos)
        name = orjson.loads(raw[pos:key_end])  # escapes decoded: "mod\u0065l" is `model`
        start = pos = _skip_ws(raw, _skip_ws(raw, key_end) + 1)  # past ":"
        first = raw[pos]
        if first == _QUOTE:
            pos = _string_end(raw, pos)
        elif first in _OPEN:
            pos = _container_end(raw, pos)
        else:
            pos = _SCALAR.match(raw, pos).end()  # type: ignore[union-attr]
        members.append(Member(name, key_start, start, pos))
        pos = _skip_ws(raw, pos)
        if raw[pos] == _CLOSE_BRACE:
            return members, pos
        pos = _skip_ws(raw, pos + 1)  # past ","


def member_spans(raw: bytes) -> tuple[dict[str, list[Span]], int]:
    """Where the value of each top-level member lies in `raw` (every occurrence of a
    repeated name), and the offset of its closing brace."""
    members, end = member_places(raw)
    spans: dict[str, list[Span]] = {}
    for member in members:
        spans.setdefault(member.name, []).append((member.start, member.stop))
    return spans, end


def _skip_ws(raw: bytes, pos: int) -> int:
    return _WS.match(raw, pos).end()  # type: ignore[union-attr]


def _string_end(raw: bytes, pos: int) -> int:
    """The offset after the string that opens at `pos`."""
    while True:
        pos = raw.index(b'"', pos + 1)
        before = pos - 1
        while raw[before] == _BACKSLASH:
            before -= 1
        if (pos - 1 - before) % 2 == 0:  # an even run of backslashes escapes none of the quote
            return pos + 1


def _container_end(raw: bytes, pos: int) -> int:
    depth = 0
    while True:
        found = _STRUCTURE.search(raw, pos)
        if found is None:
            raise ValueError("unbalanced JSON")  # orjson accepted the body: cannot happen
        pos = found.start()
        char = raw[pos]
        if char == _QUOTE:
            pos = _string_end(raw, pos)
            continue
        pos += 1
        depth += 1 if char in _OPEN else -1
        if depth == 0:
            return pos


def upstream_edits(body: dict[str, Any], spans: dict[str, list[Span]], end: int, *, stream: bool) -> list[Edit]:
    """The changes `request.upstream_body` makes, as edits of the raw bytes: every `model`
    value becomes the lane's model (MODEL), `max_completion_tokens` is also written as
    `max_tokens`, and a stream always asks for usage. A member the body lacks is added
    before its closing brace; a repeated member is replaced everywhere."""
    edits: list[Edit] = [(start, stop, MODEL) for start, stop in spans["model"]]

    def put(name: str, value: bytes) -> None:
        if name in spans:
            edits.extend((start, stop, value) for start, stop in spans[name])
        else:
            edits.append((end, end, b"," + orjson.dumps(name) + b":" + value))

    if body.get("max_completion_tokens") is not None:
        put("max_tokens", orjson.dumps(body["max_completion_tokens"]))
    if stream:
        options = body.get("stream_options")
        put("stream_options", orjson.dumps({**(options if isinstance(options, dict) else {}), "include_usage": True}))
    return sorted(edits, key=lambda edit: edit[0])  # stable: insertions keep their order


def mirror_edits(members: list[Member], end: int) -> list[Edit]:
    """The changes gateway.mirror makes to a body it replays, as edits of the raw
    bytes: every `model` becomes the mirror model (MODEL), every `stream` false (added
    before the closing brace `end` if absent), and every `stream_options` member is removed
    (with one of the commas around it)."""
    edits: list[Edit] = []
    kept_before: Member | None = None  # the last member kept so far
    removed: list[Member] = []  # removed since then

    def cut(following: Member | None) -> None:
        if not removed:
            return
        if kept_before is not None:  # `, removed…` after the kept member, up to the last removed value
            edits.append((kept_before.stop, removed[-1].stop, b""))
        elif following is not None:  # at the start: `removed… , ` up to the next kept member's name
            edits.append((removed[0].key_start, following.key_start, b""))
        removed.clear()

    for member in members:
        if member.name == "stream_options":
            removed.append(member)
            continue
        cut(member)
        kept_before = member
        if member.name == "model":
            edits.append((member.start, member.stop, MODEL))
        elif member.name == "stream":
            edits.append((member.start, member.stop, b"false"))
    cut(None)
    if not any(member.name == "stream" for member in members):
        edits.append((end, end, b',"stream":false'))
    return sorted(edits, key=lambda edit: edit[0])


def edited_body(raw: Raw, edits: list[Edit], model: str) -> StreamedBody:
    """The client's bytes with the edits applied, `model` written where MODEL stands."""
    served = orjson.dumps(model)
    return edited(raw, [(start, stop, served if value is None else value) for start, stop, value in edits])


def outline(body: dict[str, Any], spans: dict[str, list[Span]], *, affinity_messages: int) -> dict[str, Any]:
    """What the web process may read of a large body: its small top-level members, and its
    messages as a list of the same length in which only what the router reads for
    model="auto" is kept (the first `affinity_messages` and the last user message, role
    and content); every other message is `{}`. The prompt fields themselves (messages,
    tools, prompt) are read from the raw bytes or the worker's counts, never from here."""
    view = {name: value for name, value in body.items()
            if name not in PROMPT_FIELDS and spans[name][-1][1] - spans[name][-1][0] <= OUTLINE_MEMBER_MAX}
    view["model"] = body["model"]
    messages = body.get("messages")  # on /v1/completions an unchecked extra: any JSON
    if isinstance(messages, list):
        auto = body["model"] == "auto"
        keep: set[int] = set()
        if auto:
            keep = set(range(min(affinity_messages, len(messages))))
            keep.update(next(([i] for i in range(len(messages) - 1, -1, -1)
                              if isinstance(messages[i], dict) and messages[i].get("role") == "user"), []))
        view["messages"] = [{"role": messages[i].get("role"), "content": messages[i].get("content")}
                            if i in keep and isinstance(messages[i], dict) else {} for i in range(len(messages))]
    prompt = body.get("prompt")  # likewise on /v1/chat/completions
    if body["model"] == "auto" and isinstance(prompt, str | list):
        view["prompt"] = prompt if isinstance(prompt, str) else prompt[-1:]
    return view


@dataclass(frozen=True)
class Inspection:
    """A worker process's answer about one large body (plain data: it crosses processes)."""

    digest: str
    error: tuple[int, str, str, str | None] | None = None  # status, message, code, param
    outline: dict[str, Any] = field(default_factory=dict)
    stream: bool = False
    client_wants_usage: bool = False
    max_tokens: int = 0
    validated: bool = False
    prompt_spans: dict[str, list[Span]] = field(default_factory=dict)
    edits: list[Edit] = field(default_factory=list)
    prompt_chars: int = 0
    prompt: str | None = None  # the prompt's text, only when the key logs prompts
    mirror_edits: list[Edit] = field(default_factory=list)


def inspect(raw: bytes, endpoint: str, max_n: int, affinity_messages: int, want_prompt: bool) -> Inspection:
    """Runs in a worker process: parse, validate, and describe the body."""
    digest = hashlib.sha256(raw).hexdigest()
    try:
        request = parse_request(raw, endpoint=endpoint, max_n=max_n)
    except GatewayError as error:
        return Inspection(digest=digest, error=(error.status, error.message, error.code, error.param))
    members, end = member_places(raw)
    spans: dict[str, list[Span]] = {}
    for member in members:
        spans.setdefault(member.name, []).append((member.start, member.stop))
    text = prompt_text(request)
    return Inspection(
        digest=digest, outline=outline(request.body, spans, affinity_messages=affinity_messages),
        stream=request.stream, client_wants_usage=request.client_wants_usage, max_tokens=request.max_tokens,
        validated=request.validated, prompt_spans={name: spans[name] for name in PROMPT_FIELDS if name in spans},
        edits=upstream_edits(request.body, spans, end, stream=request.stream), prompt_chars=len(text),
        prompt=text if want_prompt else None, mirror_edits=mirror_edits(members, end),
    )


def inspect_shared(path: str, size: int, endpoint: str, max_n: int, affinity_messages: int,
                   want_prompt: bool) -> Inspection:
    """Runs in a worker process: `inspect` the body the web process wrote to `path`."""
    try:
        with open(path, "rb") as file:
            raw = file.read(size)
    except OSError:  # its file is gone (swept by hand, /dev/shm unmounted)
        return Inspection(digest="", error=(503, "The request body could not be read back.", "server_busy", None))
    return inspect(raw, endpoint, max_n, affinity_messages, want_prompt)


@dataclass(frozen=True)
class LargeBody:
    """What a ParsedRequest of a large body carries instead of the parsed body. `raw` is
    the client's bytes, or the shared-memory file they were read into (kept open while
    anything — an upstream send, a mirror replay — still refers to it)."""

    raw: bytes | SharedBody
    digest: str
    edits: list[Edit]
    prompt_spans: dict[str, list[Span]]
    prompt_chars: int
    prompt: str | None
    mirror_edits: list[Edit] = field(default_factory=list)

    def forward(self, model: str) -> StreamedBody:
        return edited_body(self.raw, self.edits, model)

    def mirror(self, model: str) -> StreamedBody:
        """The body a mirror replay sends (gateway.mirror: the mirror model, not
        streamed), cut from the raw bytes like the one sent to the lane."""
        return edited_body(self.raw, self.mirror_edits, model)

    def prompt_members(self, model: str) -> StreamedBody:
        """`{"model": model, "messages": …, "tools": …}` (or `prompt`) cut from the raw
        bytes: the lane's /tokenize body, never re-serialised."""
        pieces: list[Piece] = [b'{"model":' + orjson.dumps(model)]
        for name, places in self.prompt_spans.items():
            pieces += [b"," + orjson.dumps(name) + b":", places[-1]]
        return StreamedBody(self.raw, [*pieces, b"}"])


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


class HeldBytes:
    """The bytes of large bodies this web process holds, from the first byte read until
    their request ends (PORTAL_GATEWAY_LARGE_BODY_HELD_MAX_BYTES). Each body alone is bounded
    (PORTAL_GATEWAY_MAX_BODY_BYTES), but not how many arrive at once; and the pace that
    keeps them from taking the event loop also makes each one stay longer. Past the bound a
    body is refused with 503 `server_busy` — before a byte of it is read when its length is
    announced, as it grows past the bound otherwise — so slow uploads in numbers cannot fill
    the process's memory or /dev/shm. A body alone is always let in, whatever its size."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # tests run gateways on several event loops
        self.held = 0

    def hold(self, limit: int) -> Holding:
        return Holding(self, limit)

    def _take(self, size: int, limit: int, own: int) -> None:
        """`own`: what the taker holds already (a body alone is never refused)."""
        with self._lock:
            if limit and self.held > own and self.held + size > limit:
                raise busy_error()
            self.held += size

    def _give(self, size: int) -> None:
        with self._lock:
            self.held -= size


class Holding:
    """One request's share of HELD: grown as its body is known, given back once."""

    def __init__(self, owner: HeldBytes, limit: int) -> None:
        self.owner, self.limit, self.size = owner, limit, 0

    def grow_to(self, size: int) -> None:
        if size > self.size:
            self.owner._take(size - self.size, self.limit, self.size)
            self.size = size

    def release(self) -> None:
        size, self.size = self.size, 0
        if size:
            self.owner._give(size)


HELD = HeldBytes()


class LargeBodyPool:
    """The worker processes (started on the first large body) and the bound on how many
    large bodies may be in them or waiting for them. One per web process."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # tests run several event loops (servers) in one process
        self._executor: ProcessPoolExecutor | None = None
        self._lifeline: Lifeline | None = None  # the workers end with this process (gateway.lifeline)
        self._shape = (0, 0)
        self.pending = 0

    def full(self, limit: int) -> bool:
        return self.pending >= limit

    def _take(self, limit: int, workers: int, niceness: int) -> ProcessPoolExecutor:
        with self._lock:
            if self.pending >= limit:
                raise busy_error()
            executor = self._executor_for(workers, niceness)
            self.pending += 1
            return executor

    def warm(self, workers: int, niceness: int) -> None:
        """Start the worker processes now (at the web process's start), not on the first
        large body: a spawned interpreter takes a while to import, longer at low priority.
        Also clears shared-memory files a killed web process left behind."""
        sweep_shared_files()
        with self._lock:
            executor = self._executor_for(workers, niceness)
        for _ in range(workers):
            executor.submit(os.getpid)

    def _executor_for(self, workers: int, niceness: int) -> ProcessPoolExecutor:
        if self._executor is None or self._shape != (workers, niceness):
            if self._executor is not None:
                self._executor.shutdown(wait=False)
            if self._lifeline is None:
                self._lifeline = Lifeline()
            # spawn: a fork of a threaded web process could inherit a held lock.
            self._executor = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"),
                                                 initializer=worker_start, initargs=(niceness, self._lifeline.reader))
            self._shape = (workers, niceness)
        return self._executor

    def _release(self, _: Future[Inspection]) -> None:
        with self._lock:
            self.pending -= 1

    def _reset(self, broken: ProcessPoolExecutor) -> None:
        with self._lock:
            if self._executor is broken:
                self._executor = None

    async def inspect(self, raw: bytes | SharedBody, *, endpoint: str, max_n: int, affinity_messages: int,
                      want_prompt: bool, workers: int, queue: int, niceness: int) -> Inspection:
        """Bytes are pickled to the worker; a SharedBody is read there by name."""
        executor = self._take(workers + queue, workers, niceness)
        try:
            if isinstance(raw, SharedBody):
                future = executor.submit(inspect_shared, raw.path, raw.size, endpoint, max_n,
                                         affinity_messages, want_prompt)
            else:
                future = executor.submit(inspect, raw, endpoint, max_n, affinity_messages, want_prompt)
        except (BrokenProcessPool, RuntimeError):
            self._release(Future())
            self._reset(executor)
            raise busy_error() from None
        # The slot is freed when the worker is done, not when the client leaves: the bound
        # counts the work really in the processes.
        future.add_done_callback(self._release)
        try:
            return await asyncio.wrap_future(future)
        except BrokenProcessPool:  # a worker died (killed): start afresh on the next body
            self._reset(executor)
            raise busy_error() from None

    def shutdown(self) -> None:
        """The web process stops: the worker processes exit (bounded) before it does."""
        with self._lock:
            executor, self._executor = self._executor, None
            lifeline, self._lifeline = self._lifeline, None
        if executor is not None:
            stop_executor(executor)
        if lifeline is not None:
            lifeline.cut()  # and the workers of an executor replaced earlier (another shape)
            stop_resource_tracker()


POOL = LargeBodyPool()


def request_of(inspection: Inspection, raw: bytes | SharedBody) -> ParsedRequest:
    if inspection.error is not None:
        status, message, code, param = inspection.error
        raise GatewayError(status, message, code=code, param=param)
    body = inspection.outline
    return ParsedRequest(
        body=body, model=body["model"], stream=inspection.stream, client_wants_usage=inspection.client_wants_usage,
        max_tokens=inspection.max_tokens, validated=inspection.validated, size=len(raw),
        large=LargeBody(raw=raw, digest=inspection.digest, edits=inspection.edits,
                        prompt_spans=inspection.prompt_spans, prompt_chars=inspection.prompt_chars,
                        prompt=inspection.prompt, mirror_edits=inspection.mirror_edits),
    )

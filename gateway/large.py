"""Large request bodies, kept off the web process's GIL.

orjson parses an 8 MB body in ~8 ms and writes it back in ~6 ms, holding the GIL all that
time even in a worker thread: every other request of the process waits for it. So a body
above portal.tuning.GATEWAY_LARGE_BODY_BYTES is parsed and validated (the same
`parse_request`, the same rules) in a small pool of worker processes (gateway.large_pool),
which send back only what the web process needs (`Inspection`): the body's outline (its
small top-level members and the shape of its messages), counts for the context guard, its
digest, and where each top-level member lies in the raw bytes (gateway.large_spans). The
body sent upstream is then the client's own bytes with the few members the gateway changes
(`model`, `max_tokens`, `stream_options`, `priority`) replaced in place (`LargeBody.forward`): a large
body is never parsed nor re-serialised in the web process, and everything else in it
reaches the lane byte for byte.

Nor is it copied whole on the event loop. A body that announces its length is written,
as it arrives, into a shared-memory file (`SharedBody`, gateway.shared_files: in /dev/shm,
files recycled from body to body): the worker reads it from there, so only its name
crosses the pipe (an 8 MB body pickled into the pipe cost the web process ~3 ms of GIL
each), and the body sent upstream is a `StreamedBody` (gateway.body), slices read back
from that file with the edits in between, never one joined copy. Where there is no
/dev/shm, or the body came without a length, the bytes are read as before and pickled to
the worker; a full /dev/shm is 503 `server_busy`.
Large bodies are read at a bounded rate (gateway.pace).

The pool is bounded: portal.tuning.GATEWAY_LARGE_BODY_WORKERS bodies are inspected at once and
portal.tuning.GATEWAY_LARGE_BODY_QUEUE more may wait; beyond that a large body is refused with
503 and `retry-after`, so a flood of huge bodies cannot take the process's memory or
starve the small requests.

This module is what the worker processes run (`inspect`, `inspect_shared`) and what the web
process makes of their answer (`request_of`, `LargeBody`). No Django here: the worker
processes import this module alone (and the gateway modules it imports)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from typing import Any

import orjson

from gateway.body import Piece, StreamedBody
from gateway.large_spans import (
    PROMPT_FIELDS,
    Edit,
    Span,
    edited_body,
    member_places,
    mirror_edits,
    outline,
    priority_edits,
    upstream_edits,
)
from gateway.request import ParsedRequest, parse_request, prompt_text
from gateway.shared_files import SharedBody
from gateway.wire import GatewayError


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
    priority_spans: list[Span] = field(default_factory=list)  # the client's own `priority` members
    end: int = 0  # the body's closing brace


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
        priority_spans=spans.get("priority", []), end=end,
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
    priority_spans: list[Span] = field(default_factory=list)
    end: int = 0

    def forward(self, model: str, priority: int | None) -> StreamedBody:
        """The body sent to the lane, with vLLM's `priority` decided at the request's turn
        (gateway.request.upstream_body): a large body is ranked like a small one."""
        edits = sorted([*self.edits, *priority_edits(self.priority_spans, self.end, priority)], key=lambda e: e[0])
        return edited_body(self.raw, edits, model)

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
                        prompt=inspection.prompt, mirror_edits=inspection.mirror_edits,
                        priority_spans=inspection.priority_spans, end=inspection.end),
    )

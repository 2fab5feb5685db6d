"""Where the top-level members of a large body lie in its raw bytes, and the edits the
gateway makes there (gateway.large): the body sent to the lane, the one a mirror replays,
and the outline the web process reads instead of the parsed body. Pure functions: they run
in the worker processes, on a body orjson has already accepted."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import orjson

from gateway.body import Raw, StreamedBody, edited

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


def priority_edits(spans: list[Span], end: int, priority: int | None) -> list[Edit]:
    """vLLM's `priority` as the gateway sends it (gateway.request.sent_priority): every copy the
    client wrote gets the value, or one is added before the closing brace `end`. On a fcfs
    lane (None) a client's copies become 0 — what vLLM takes there, as the small path, which
    drops the member — and none is added."""
    if priority is None:
        return [(start, stop, b"0") for start, stop in spans]
    value = orjson.dumps(priority)
    return [(start, stop, value) for start, stop in spans] or [(end, end, b',"priority":' + value)]


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

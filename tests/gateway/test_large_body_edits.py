"""Large bodies (gateway.large, gateway.large_spans) as pure functions, without a server:
every top-level member found in the raw bytes, the edits that make the body sent upstream
and the mirror's replay the small path's with every other member byte for byte, the
outline the router reads, bounded slices, and the pace's budget."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace
from typing import Any, cast

import orjson
import pytest
from django.test import override_settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from gateway import body as streamed
from gateway.body import StreamedBody
from gateway.directory import KeyInfo
from gateway.large import inspect, request_of
from gateway.large_spans import member_places, member_spans, outline
from gateway.mirror import mirror_body
from gateway.pace import BytePace
from gateway.request import parse_request, prompt_text, upstream_body
from gateway.route import conversation_key, last_user_text, prompt_upper_bound

PAD = "p" * 2048

TEXT = st.text(alphabet=st.characters(blacklist_categories=["Cs"]), max_size=12)
JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(TEXT, inner, max_size=4),
    max_leaves=16,
)
FORMATS = st.sampled_from([
    {}, {"indent": 1}, {"separators": (",", ":")}, {"separators": (" , ", " : "), "ensure_ascii": False},
    {"indent": "\t", "ensure_ascii": False},
])


def sent(body: bytes | StreamedBody) -> bytes:
    """The bytes that go upstream: a StreamedBody's slices, as the upstream send reads them."""
    if isinstance(body, bytes):
        return body

    async def collect() -> bytes:
        return b"".join([bytes(chunk) async for chunk in body.chunks()])

    collected = asyncio.run(collect())
    assert len(collected) == body.length  # the content-length announced upstream
    return collected


@hypothesis_settings(max_examples=300, deadline=None)
@given(body=st.dictionaries(TEXT, JSON_VALUES, min_size=1, max_size=6), form=FORMATS)
def test_member_spans_find_every_top_level_value(body: dict[str, Any], form: dict[str, Any]) -> None:
    raw = json.dumps(body, **form).encode()
    spans, end = member_spans(raw)
    assert {name: orjson.loads(raw[start:stop]) for name, [(start, stop)] in spans.items()} == body
    assert raw[end:end + 1] == b"}" and not raw[end + 1:].strip()


CHAT_BODIES = st.fixed_dictionaries(
    {"model": st.text(min_size=1, max_size=10),
     "messages": st.lists(st.fixed_dictionaries({"role": st.sampled_from(["user", "assistant", "system"]),
                                                 "content": TEXT}), min_size=1, max_size=4)},
    optional={"max_completion_tokens": st.integers(1, 10_000), "max_tokens": st.integers(1, 10_000),
              "stream": st.booleans(), "temperature": st.floats(0, 2), "top_k": st.integers(-1, 50),
              "x_vendor": JSON_VALUES},
)


@hypothesis_settings(max_examples=300, deadline=None)
@given(body=CHAT_BODIES, form=FORMATS, wants_usage=st.booleans())
def test_a_large_body_is_forwarded_as_the_small_path_would_and_other_members_byte_for_byte(
    body: dict[str, Any], form: dict[str, Any], wants_usage: bool
) -> None:
    if body.get("stream") and wants_usage:
        body["stream_options"] = {"include_usage": True, "x_extra": 1}
    raw = json.dumps(body, **form).encode()
    inspection = inspect(raw, "chat.completions", 8, 2, False)
    forwarded = sent(upstream_body(request_of(inspection, raw), upstream_model="served/model"))
    small = sent(upstream_body(parse_request(raw, endpoint="chat.completions", max_n=8), upstream_model="served/model"))
    assert orjson.loads(forwarded) == orjson.loads(small)
    before, after = member_spans(raw)[0], member_spans(forwarded)[0]
    for name in set(before) - {"model", "max_tokens", "stream_options"}:
        assert [raw[a:b] for a, b in before[name]] == [forwarded[a:b] for a, b in after[name]]


@hypothesis_settings(max_examples=200, deadline=None)
@given(body=CHAT_BODIES, form=FORMATS, asked=st.none() | st.integers(-5, 9) | st.booleans() | TEXT,
       ours=st.none() | st.integers(0, 3))
def test_a_large_body_gets_the_gateways_priority_as_a_small_one(
    body: dict[str, Any], form: dict[str, Any], asked: Any, ours: int | None
) -> None:
    """vLLM's `priority` decided at the request's turn (gateway.request.sent_priority), written
    into the raw bytes: a client's own may lower the request, never raise it; on a fcfs lane
    (None) a client's copy becomes 0, which vLLM takes there (the small path drops it)."""
    if asked is not None:
        body["priority"] = asked
    raw = json.dumps(body, **form).encode()
    forwarded = orjson.loads(sent(upstream_body(request_of(inspect(raw, "chat.completions", 8, 2, False), raw),
                                                upstream_model="m", priority=ours)))
    small = orjson.loads(sent(upstream_body(parse_request(raw, endpoint="chat.completions", max_n=8),
                                            upstream_model="m", priority=ours)))
    if ours is None and asked is not None:
        assert forwarded.pop("priority") == 0 and "priority" not in small
    assert forwarded == small
    if ours is not None:
        lower = isinstance(asked, int) and not isinstance(asked, bool) and asked > ours
        assert forwarded["priority"] == (asked if lower else ours)


def test_a_repeated_priority_is_replaced_everywhere_in_a_large_body() -> None:
    raw = b'{"model":"a","priority":-3,"messages":[{"role":"user","content":"x"}], "priority" : -1}'
    request = request_of(inspect(raw, "chat.completions", 8, 2, False), raw)
    assert sent(upstream_body(request, upstream_model="m", priority=2)) == (
        b'{"model":"m","priority":2,"messages":[{"role":"user","content":"x"}], "priority" : 2}')


def test_edits_reach_every_copy_of_a_repeated_or_escaped_member() -> None:
    raw = (b'{"model": "a", "mod\\u0065l" :"b",  "messages":[{"role":"user","content":"}\\"{"}],'
           b' "max_completion_tokens": 5, "max_tokens":1, "max_tokens":2 }')
    request = request_of(inspect(raw, "chat.completions", 8, 2, False), raw)
    assert sent(upstream_body(request, upstream_model="m")) == (
        b'{"model": "m", "mod\\u0065l" :"m",  "messages":[{"role":"user","content":"}\\"{"}],'
        b' "max_completion_tokens": 5, "max_tokens":5, "max_tokens":5 }')


def test_the_outline_keeps_what_the_router_reads_of_a_large_auto_body() -> None:
    key = cast(KeyInfo, SimpleNamespace(id=7))
    body = {"model": "auto", "max_completion_tokens": 30, "messages": [
        {"role": "system", "content": "be brief"}, {"role": "user", "content": "first"},
        {"role": "assistant", "content": "ok", "tool_calls": [{"id": "c"}]}, {"role": "user", "content": "last"},
        {"role": "tool", "content": "x" * 5000, "tool_call_id": "c"}]}
    raw = orjson.dumps(body)
    view = outline(body, member_spans(raw)[0], affinity_messages=2)
    assert last_user_text(view) == last_user_text(body) == "last"
    assert conversation_key(view, key) == conversation_key(body, key)
    assert prompt_upper_bound(len(raw), view) == prompt_upper_bound(len(raw), body)
    explicit = outline({**body, "model": "qwen"}, member_spans(raw)[0], affinity_messages=2)
    assert explicit["messages"] == [{}] * 5  # only their number, when no router reads them


@pytest.mark.parametrize("endpoint, body", [
    ("completions", {"model": "auto", "prompt": "x", "messages": [1, "two", None, {"role": 3}]}),
    ("chat.completions", {"model": "auto", "messages": [{"role": "user", "content": "x"}], "prompt": 5}),
    ("chat.completions", {"model": "auto", "messages": [{"role": "user", "content": "x"}], "prompt": {"a": 1}}),
])
def test_unchecked_extras_named_like_prompt_fields_do_not_break_a_large_body(endpoint: str, body: Any) -> None:
    raw = orjson.dumps({**body, "x_pad": PAD})
    request = request_of(inspect(raw, endpoint, 8, 2, False), raw)
    assert not request.validated and orjson.loads(sent(upstream_body(request, upstream_model="m")))["model"] == "m"
    assert len(request.body.get("messages", [])) == len(body.get("messages", []))
    small = parse_request(orjson.dumps(body), endpoint=endpoint, max_n=8)  # the small path reads them too
    assert isinstance(prompt_text(small), str) and isinstance(prompt_text(request), str)


@hypothesis_settings(max_examples=300, deadline=None)
@given(body=CHAT_BODIES, form=FORMATS, options=st.lists(st.integers(0, 7), max_size=3), repeat_model=st.booleans())
def test_a_large_bodys_mirror_replay_is_the_small_paths_with_every_other_member_byte_for_byte(
    body: dict[str, Any], form: dict[str, Any], options: list[int], repeat_model: bool
) -> None:
    if options:
        body["stream"] = True  # stream_options are refused on a body that does not stream
    raw = json.dumps(body, **form).encode()
    # stream_options (a member the mirror removes) anywhere: first, between, last, repeated
    members, end = member_places(raw)
    member = b'"stream_options" : {"include_usage": true}'
    for place in sorted(options, reverse=True):
        if place < len(members):
            at = members[place].key_start
            raw = raw[:at] + member + b",\n" + raw[at:]
        else:
            raw = raw[:end] + b" ," + member + raw[end:]
    if repeat_model:  # a repeated member: every copy is the mirror model
        raw = raw[:-1].rstrip() + b', "model": "again"}'
    request = request_of(inspect(raw, "chat.completions", 8, 2, False), raw)
    assert request.large is not None
    mirrored = sent(request.large.mirror("mirror/model"))
    with override_settings(GATEWAY_MIRROR_MODEL="mirror/model"):
        small = mirror_body(parse_request(raw, endpoint="chat.completions", max_n=8).body)
    assert orjson.loads(mirrored) == orjson.loads(small)
    kept_before = [(name, raw[a:b]) for name, places in member_spans(raw)[0].items() for a, b in places
                   if name not in ("model", "stream", "stream_options")]
    kept_after = [(name, mirrored[a:b]) for name, places in member_spans(mirrored)[0].items() for a, b in places
                  if name not in ("model", "stream")]
    assert sorted(kept_before) == sorted(kept_after)


def test_a_streamed_body_goes_in_bounded_slices_with_the_edits_between(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(streamed, "SLICE", 1000)
    raw = orjson.dumps({"model": "a", "messages": [{"role": "user", "content": "x" * 10_000}], "max_completion_tokens": 3})
    request = request_of(inspect(raw, "chat.completions", 8, 2, False), raw)
    body = upstream_body(request, upstream_model="served")
    assert isinstance(body, StreamedBody)

    async def slices() -> list[bytes]:
        return [bytes(chunk) async for chunk in body.chunks()]

    chunks = asyncio.run(slices())
    assert len(chunks) > 10 and max(map(len, chunks)) <= 1000
    assert b"".join(chunks) == body.join() == raw.replace(b'"model":"a"', b'"model":"served"')[:-1] + b',"max_tokens":3}'
    assert asyncio.run(slices()) == chunks  # fresh on every call (a send refused before a byte left is made again)


def test_the_pace_lets_a_second_of_budget_through_at_once_then_holds_to_the_rate() -> None:
    pace, rate = BytePace(), 1000.0
    assert pace.delay(1000, rate, now=100.0) == 0.0  # one second's worth, after idling: at once
    assert pace.delay(500, rate, now=100.0) == pytest.approx(0.5)  # beyond it: the rate
    assert pace.delay(500, rate, now=100.0) == pytest.approx(1.0)  # a second reader waits its turn too
    assert pace.delay(100, rate, now=101.0) == pytest.approx(0.1)  # caught up at 101.0: the rate again
    assert pace.delay(1000, rate, now=200.0) == 0.0  # idle long: no more than one second of credit
    assert pace.delay(1, rate, now=200.0) == pytest.approx(0.001)
    assert BytePace().delay(10**9, 0, now=0.0) == 0.0  # rate 0: unpaced

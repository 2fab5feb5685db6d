"""Large bodies (gateway.large): validated in worker processes with the same rules
and the same answers as small ones, forwarded as the client's bytes with only the
gateway's edits, their prompt counted and logged from the raw bytes, and refused with 503
and `retry-after` when the worker pool is full — never parsed nor re-serialised in the
web process."""

from __future__ import annotations

import asyncio
import contextlib
import errno
import json
import os
import threading
import time
from collections.abc import Iterator
from types import SimpleNamespace
from typing import Any, cast

import httpx
import orjson
import pytest
from django.contrib.auth.models import User
from django.test import override_settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from gateway import body as streamed
from gateway import large
from gateway.body import StreamedBody
from gateway.directory import KeyInfo
from gateway.large import POOL, inspect, member_spans, outline, request_of
from gateway.mirror import LARGE_MIRRORS, LARGE_MIRRORS_MAX, mirror_body
from gateway.pace import PACE, BytePace
from gateway.request import parse_request, prompt_text, upstream_body
from gateway.route import conversation_key, last_user_text, prompt_upper_bound
from gateway.wire import GatewayError
from sparksim.standalone import EngineHandle
from tests.conftest import wait_for
from tests.gateway.conftest import Gateway, create_key, engine_received
from tests.gateway.test_bad_input import BAD_INPUT, post
from tests.gateway.upstreams import CountingUpstream

LARGE = 1024  # PORTAL_GATEWAY_LARGE_BODY_BYTES in these tests: every padded body goes to the pool
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


@pytest.fixture
def large_bodies(settings: Any) -> None:
    settings.GATEWAY_LARGE_BODY_BYTES = LARGE


def sent(body: bytes | StreamedBody) -> bytes:
    """The bytes that go upstream: a StreamedBody's slices, as the upstream send reads them."""
    if isinstance(body, bytes):
        return body

    async def collect() -> bytes:
        return b"".join([bytes(chunk) async for chunk in body.chunks()])

    collected = asyncio.run(collect())
    assert len(collected) == body.length  # the content-length announced upstream
    return collected


def shared_files() -> list[str]:
    return [name for name in os.listdir(large.SHARED_DIR) if name.startswith(f"{large.SHARED_PREFIX}{os.getpid()}-")]


def discarded(path: str) -> bool:
    """The file is gone and no descriptor of this process holds its pages."""
    return not os.path.exists(path) and not any(target.startswith(path + " ") or target == path
                                                for target in open_shared_files())


def open_shared_files() -> list[str]:
    """This process's descriptors still open on a shared body (removed or not): its pages."""
    targets = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            targets.append(os.readlink(f"/proc/self/fd/{fd}"))
    return [target for target in targets if f"/{large.SHARED_PREFIX}{os.getpid()}-" in target]


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


@pytest.mark.parametrize("case, body, path, code, param", BAD_INPUT, ids=[case[0] for case in BAD_INPUT])
def test_bad_input_in_a_large_body_gets_the_same_answer(
    gateway: Gateway, qwen_engine: EngineHandle, large_bodies: None, case: str, body: Any, path: str, code: str,
    param: str | None,
) -> None:
    raw = orjson.dumps({**body, "x_pad": PAD}) if isinstance(body, dict) else (
        body if isinstance(body, bytes) else orjson.dumps(body)) + b" " * len(PAD)
    assert len(raw) > LARGE
    response = post(gateway, raw, path)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    assert engine_received(qwen_engine, ("/v1/chat/completions", "/v1/completions", "/tokenize")) == []


def test_a_large_body_reaches_the_lane_as_sent_but_for_the_gateways_edits(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, key_owner: User
) -> None:
    from gateway.models import RequestLog

    content = "\\u00e9t\\u00e9 " * 600
    raw = (b'{ "model" :  "qwen",\n "messages": [{"role":"user","content":"' + content.encode() + b'"}],\n'
           b'  "max_completion_tokens": 9 , "top_k" : 5e0, "x_vendor": {"b": [1, 2.50]}\n}')
    secret, key_id = create_key(key_owner, name="audited", log_prompts=True)
    response = post(fault_gateway, raw, secret=secret)
    assert response.status_code == 200, response.text
    assert upstream.raw_bodies == [raw.replace(b'"model" :  "qwen"', b'"model" :  "qwen-test"')[:-1]
                                   + b',"max_tokens":9}']
    # The context guard asked the lane's /tokenize with the messages cut from the raw bytes.
    assert upstream.tokenize_bodies == [{"model": "qwen-test", "messages": orjson.loads(raw)["messages"]}]
    row = wait_for(lambda: RequestLog.objects.filter(key_id=key_id).first(), what="the request's log row")
    assert row.prompt_text == orjson.loads(raw)["messages"][0]["content"] and row.status == 200

    stream = raw.replace(b'"top_k"', b'"stream": true, "top_k"')
    answer = post(fault_gateway, stream)
    assert answer.status_code == 200 and b'"usage"' not in answer.content  # the client did not ask
    assert upstream.raw_bodies[-1] == (stream.replace(b'"model" :  "qwen"', b'"model" :  "qwen-test"')[:-1]
                                       + b',"max_tokens":9,"stream_options":{"include_usage":true}}')


def test_large_bodies_beyond_the_pool_bound_get_503_with_retry_after(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, settings: Any,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    settings.GATEWAY_LARGE_BODY_WORKERS, settings.GATEWAY_LARGE_BODY_QUEUE = 1, 2
    monkeypatch.setattr(POOL, "pending", 3)  # as if three large bodies were being inspected
    large = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": PAD}]})

    def chunks() -> Iterator[bytes]:  # no content-length: refused when the body has been read
        yield large[:100]
        yield large[100:]

    for content in (large, chunks()):
        refused = httpx.post(f"{fault_gateway.url}/v1/chat/completions", content=content, timeout=15,
                             headers={**fault_gateway.headers(), "content-type": "application/json"})
        assert refused.status_code == 503, refused.text
        assert refused.json()["error"]["code"] == "server_busy" and refused.headers["retry-after"] == "1"
    assert post(fault_gateway, {"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}).status_code == 200
    assert upstream.completions == 1
    monkeypatch.setattr(POOL, "pending", 2)  # one slot free again
    assert post(fault_gateway, large).status_code == 200
    assert upstream.completions == 2


@hypothesis_settings(max_examples=300, deadline=None)
@given(body=CHAT_BODIES, form=FORMATS, options=st.lists(st.integers(0, 7), max_size=3), repeat_model=st.booleans())
def test_a_large_bodys_mirror_replay_is_the_small_paths_with_every_other_member_byte_for_byte(
    body: dict[str, Any], form: dict[str, Any], options: list[int], repeat_model: bool
) -> None:
    if options:
        body["stream"] = True  # stream_options are refused on a body that does not stream
    raw = json.dumps(body, **form).encode()
    # stream_options (a member the mirror removes) anywhere: first, between, last, repeated
    members, end = large.member_places(raw)
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


def test_a_large_body_with_a_length_goes_through_a_shared_memory_file_that_is_recycled(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    seen: list[str] = []
    inspect_shared = large.inspect_shared

    def spy(path: str, *args: Any) -> Any:
        seen.append(path)
        return inspect_shared(path, *args)

    files = large.SharedFiles()
    monkeypatch.setattr(large, "SHARED_FILES", files)
    monkeypatch.setattr(large, "inspect_shared", spy)
    monkeypatch.setattr(POOL, "_executor_for", lambda workers, niceness: InlineExecutor())  # the spy runs here
    raw = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": PAD * 2}], "x_vendor": [1.50, "é"]})
    response = post(fault_gateway, raw)
    assert response.status_code == 200, response.text
    assert len(seen) == 1 and seen[0].startswith(os.path.join(large.SHARED_DIR, large.SHARED_PREFIX))
    assert upstream.raw_bodies == [raw.replace(b'"model":"qwen"', b'"model":"qwen-test"')]
    # Once nothing refers to the body, its file waits for the next one, which gets its own
    # bytes only (a shorter body: the rest of the file is the first one's, never read).
    wait_for(lambda: [file.path for file in files.idle] == seen, what="the file back in the pool")
    shorter = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": "q" * 1500}]})
    assert post(fault_gateway, shorter).status_code == 200
    assert seen == [seen[0]] * 2
    assert upstream.raw_bodies[-1] == shorter.replace(b'"model":"qwen"', b'"model":"qwen-test"')
    bad = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": PAD}], "temperature": "hot"})
    assert post(fault_gateway, bad).status_code == 400
    wait_for(lambda: [file.path for file in files.idle] == seen[:1], what="the file back in the pool")
    assert os.path.basename(seen[0]) in shared_files()  # one file for the three bodies
    files.clear()  # the web process stops: removed, and its pages freed (the descriptor closed)
    wait_for(lambda: discarded(seen[0]), what="the file to be discarded")


def test_idle_shared_files_are_bounded_and_the_rest_discarded(monkeypatch: pytest.MonkeyPatch) -> None:
    mib = 1024 * 1024
    files = large.SharedFiles()
    monkeypatch.setattr(large, "SHARED_FILES", files)
    monkeypatch.setattr(large, "SHARED_IDLE_MAX", 3 * mib)

    def written(size: int) -> large.SharedBody:
        body = large.SharedBody.create(size)
        assert body is not None
        body.write(b"x" * size)
        return body

    one, two, three = written(mib), written(2 * mib), written(2 * mib)
    files_of = [one.file, two.file, three.file]
    del one, two  # released: 3 MiB idle, the bound
    assert [file.high for file in files.idle] == [mib, 2 * mib]
    del three  # over the bound: discarded, its pages freed
    wait_for(lambda: discarded(files_of[2].path), what="the file over the bound to be discarded")
    # The next body takes the file that holds its bytes with the fewest to spare.
    again = large.SharedBody.create(mib + 1)
    assert again is not None and again.file is files_of[1] and files.idle == [files_of[0]]
    del again
    files.clear()
    wait_for(lambda: discarded(files_of[0].path) and discarded(files_of[1].path), what="the idle files to be discarded")


def test_a_shared_body_holds_only_the_bytes_it_was_sent_and_a_full_dev_shm_is_503(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(large, "SHARED_FILES", large.SharedFiles())
    announced = large.SharedBody.create(16 * 1024 * 1024)  # a client announces 16 MB, sends one byte
    assert announced is not None
    announced.write(b"{")
    assert os.fstat(announced.file.fd).st_blocks * 512 <= 8192

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)  # a full tmpfs cannot be made here without filling the machine's
    with pytest.raises(GatewayError) as refused:
        announced.write(b'"model"')
    assert (refused.value.status, refused.value.code, refused.value.retry_after_s) == (503, "server_busy", 1)


def test_without_shared_memory_a_large_body_is_read_into_the_process_and_forwarded_the_same(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    monkeypatch.setattr(large, "SHARED_DIR", str(tmp_path / "missing"))
    raw = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": PAD}], "top_k": 5})
    response = post(fault_gateway, raw)
    assert response.status_code == 200, response.text
    assert upstream.raw_bodies == [raw.replace(b'"model":"qwen"', b'"model":"qwen-test"')]


class InlineExecutor:
    """A process pool stand-in that runs the call at once, in this process."""

    def submit(self, function: Any, *args: Any) -> Any:
        from concurrent.futures import Future

        future: Future[Any] = Future()
        future.set_result(function(*args))
        return future


@pytest.fixture
def mirror_upstream(second_upstream: CountingUpstream, settings: Any) -> CountingUpstream:
    settings.GATEWAY_MIRROR_BASE_URL = f"{second_upstream.url}/v1"
    settings.GATEWAY_MIRROR_MODEL = "mirror-model"
    settings.GATEWAY_MIRROR_SHARE = 1.0
    return second_upstream


def test_a_large_body_is_mirrored_with_its_bytes_cut_for_the_mirror(
    fault_gateway: Gateway, upstream: CountingUpstream, mirror_upstream: CountingUpstream, large_bodies: None
) -> None:
    from gateway.models import MirrorSample

    raw = (b'{"stream_options": {"include_usage": true}, "model": "qwen", "stream": true,\n'
           b' "messages": [{"role": "user", "content": "' + PAD.encode() + b'"}], "top_k": 5e0}')
    response = post(fault_gateway, raw)
    assert response.status_code == 200, response.text
    sample = wait_for(lambda: MirrorSample.objects.first(), what="the large body's mirrored sample")
    assert sample.error == "" and sample.external_model == "mirror-model" and sample.divergence is not None
    assert mirror_upstream.raw_bodies == [
        b'{"model": "mirror-model", "stream": false,\n'
        b' "messages": [{"role": "user", "content": "' + PAD.encode() + b'"}], "top_k": 5e0}']
    no_stream = raw.replace(b'"stream_options": {"include_usage": true}, ', b"").replace(b' "stream": true,', b"")
    assert post(fault_gateway, no_stream).status_code == 200
    wait_for(lambda: len(mirror_upstream.raw_bodies) == 2, what="the second mirror replay")
    assert mirror_upstream.raw_bodies[1] == no_stream.replace(b'"qwen"', b'"mirror-model"')[:-1] + b',"stream":false}'
    # Given back when the replay ended (after the mirror upstream has the body and its
    # sample is saved: wait for it, the replay runs after the client's answer).
    wait_for(lambda: LARGE_MIRRORS.held == 0, what="the large mirror slot given back")


def test_large_bodies_held_for_mirror_replays_are_bounded(
    fault_gateway: Gateway, upstream: CountingUpstream, mirror_upstream: CountingUpstream, large_bodies: None,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from gateway.models import MirrorSample

    monkeypatch.setattr(LARGE_MIRRORS, "held", LARGE_MIRRORS_MAX)  # as if replays held the bound
    skipped = LARGE_MIRRORS.skipped
    large_body = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": PAD}]})
    assert post(fault_gateway, large_body).status_code == 200
    assert post(fault_gateway, {"model": "qwen", "messages": [{"role": "user", "content": "small"}]}).status_code == 200
    sample = wait_for(lambda: MirrorSample.objects.first(), what="the small request's mirrored sample")
    assert mirror_upstream.raw_bodies == [orjson.dumps({"model": "mirror-model",
                                                        "messages": [{"role": "user", "content": "small"}],
                                                        "stream": False})]
    assert MirrorSample.objects.count() == 1 and sample.error == ""
    assert LARGE_MIRRORS.skipped == skipped + 1 and LARGE_MIRRORS.held == LARGE_MIRRORS_MAX


def test_the_pace_lets_a_second_of_budget_through_at_once_then_holds_to_the_rate() -> None:
    pace, rate = BytePace(), 1000.0
    assert pace.delay(1000, rate, now=100.0) == 0.0  # one second's worth, after idling: at once
    assert pace.delay(500, rate, now=100.0) == pytest.approx(0.5)  # beyond it: the rate
    assert pace.delay(500, rate, now=100.0) == pytest.approx(1.0)  # a second reader waits its turn too
    assert pace.delay(100, rate, now=101.0) == pytest.approx(0.1)  # caught up at 101.0: the rate again
    assert pace.delay(1000, rate, now=200.0) == 0.0  # idle long: no more than one second of credit
    assert pace.delay(1, rate, now=200.0) == pytest.approx(0.001)
    assert BytePace().delay(10**9, 0, now=0.0) == 0.0  # rate 0: unpaced


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_bodies_are_read_at_the_budgets_pace_while_small_requests_go_on(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, settings: Any, framing: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rate = 250_000
    settings.GATEWAY_LARGE_BODY_BYTES_PER_S = rate
    monkeypatch.setattr(PACE, "paid_until", 0.0)  # no other test's debt
    raw = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "x_blob": "x" * 900_000})

    def content() -> Iterator[bytes]:
        for start in range(0, len(raw), 16_384):
            yield raw[start:start + 16_384]

    finished: list[str] = []

    def post_large() -> None:
        response = httpx.post(f"{fault_gateway.url}/v1/chat/completions", timeout=30,
                              content=raw if framing == "content-length" else content(),
                              headers={**fault_gateway.headers(), "content-type": "application/json"})
        assert response.status_code == 200, response.text
        finished.append("large")

    started = time.monotonic()
    poster = threading.Thread(target=post_large)
    poster.start()
    wait_for(lambda: PACE.paid_until > time.monotonic(), what="the large body being paced")
    small = post(fault_gateway, {"model": "qwen", "messages": [{"role": "user", "content": "hi"}]})
    assert small.status_code == 200 and finished == []  # answered while the large body is still being read
    poster.join(30)
    assert finished == ["large"]
    # Every byte past the threshold is charged; one second's worth went at once, the rest at
    # the rate, but for the last chunk the server read at once (up to its buffer and one read).
    assert PACE.paid_until >= started - 1 + (len(raw) - LARGE) / rate
    assert time.monotonic() - started >= (len(raw) - rate - LARGE - 320_000) / rate
    assert upstream.raw_bodies[-1] == raw.replace(b'"model":"qwen"', b'"model":"qwen-test"')


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_bodies_held_at_once_are_bounded_and_given_back_when_answered(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, settings: Any, framing: str,
) -> None:
    """While a 900 KB upload that stalls half-way holds PORTAL_GATEWAY_LARGE_BODY_HELD_MAX_BYTES,
    a second large body is refused with 503 and retry-after (announced: before a byte of it
    is read; chunked: as it grows past the bound), small requests go on, and once the first
    is answered its bytes are given back and the second goes through."""
    settings.GATEWAY_LARGE_BODY_HELD_MAX_BYTES = 800_000
    settings.GATEWAY_LARGE_BODY_BYTES_PER_S = 0
    assert large.HELD.held == 0
    first = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "x_blob": "x" * 900_000})
    second = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": "hi"}], "x_blob": "y" * 400_000})
    go_on = threading.Event()

    def pieces(raw: bytes, stall_at: int | None = None) -> Iterator[bytes]:
        for start in range(0, len(raw), 16_384):
            if start == stall_at:
                go_on.wait(30)  # the client pauses half-way: its body stays held
            yield raw[start:start + 16_384]

    def send(raw: bytes, stall_at: int | None = None) -> httpx.Response:
        length = {"content-length": str(len(raw))} if framing == "content-length" else {}
        return httpx.post(f"{fault_gateway.url}/v1/chat/completions", timeout=30, content=pieces(raw, stall_at),
                          headers={**fault_gateway.headers(), "content-type": "application/json", **length})

    answers: list[int] = []
    poster = threading.Thread(target=lambda: answers.append(send(first, stall_at=16_384 * 30).status_code))
    poster.start()
    wait_for(lambda: large.HELD.held >= 16_384 * 30 - LARGE, what="the first body held")
    if framing == "content-length":
        assert large.HELD.held == len(first)  # its announced length, held before its bytes came
    else:
        assert large.HELD.held < len(first)  # what has come of it so far
    refused = send(second)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "server_busy" and refused.headers["retry-after"] == "1"
    assert post(fault_gateway, {"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}).status_code == 200
    go_on.set()
    poster.join(30)
    assert answers == [200]  # alone past the bound as it grew: a body alone is never refused
    assert large.HELD.held == 0  # given back: the answered body and the refused one
    assert send(second).status_code == 200
    assert large.HELD.held == 0
    assert upstream.completions == 3  # the small one, the first and the second's retry; never the refused try
    assert upstream.raw_bodies[-1] == second.replace(b'"model":"qwen"', b'"model":"qwen-test"')


def test_one_large_body_is_let_in_whatever_the_held_bound(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, settings: Any,
) -> None:
    settings.GATEWAY_LARGE_BODY_HELD_MAX_BYTES = 10_000  # smaller than the body: a misconfiguration
    raw = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": PAD * 20}]})
    assert post(fault_gateway, raw).status_code == 200
    assert upstream.completions == 1 and large.HELD.held == 0

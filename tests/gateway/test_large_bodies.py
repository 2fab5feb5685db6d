"""Large bodies (gateway.large, gateway.large_pool, gateway.shared_files) through the
gateway: validated in worker processes with the same rules and the same answers as small
ones, forwarded as the client's bytes with only the gateway's edits, their prompt counted
and logged from the raw bytes, read through recycled shared-memory files at a bounded
pace, and refused with 503 and `retry-after` when the worker pool or the held bytes are
full — never parsed nor re-serialised in the web process. The pure functions:
test_large_body_edits.py."""

from __future__ import annotations

import contextlib
import errno
import os
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from django.contrib.auth.models import User

from gateway import large_pool
from gateway import shared_files as shared
from gateway.large import inspect_shared
from gateway.large_pool import POOL
from gateway.mirror import LARGE_MIRRORS, LARGE_MIRRORS_MAX
from gateway.pace import PACE
from gateway.wire import GatewayError
from sparksim.standalone import EngineHandle
from tests.conftest import wait_for
from tests.gateway.conftest import Gateway, LargeBodyState, create_key, engine_received, shared_files
from tests.gateway.test_bad_input import BAD_INPUT, post
from tests.gateway.upstreams import CountingUpstream

LARGE = 1024  # PORTAL_GATEWAY_LARGE_BODY_BYTES in these tests: every padded body goes to the pool
PAD = "p" * 2048


@pytest.fixture
def large_bodies(settings: Any) -> None:
    settings.GATEWAY_LARGE_BODY_BYTES = LARGE


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
    return [target for target in targets if f"/{shared.SHARED_PREFIX}{os.getpid()}-" in target]


@pytest.mark.parametrize("case, body, path, code, param", BAD_INPUT, ids=[case[0] for case in BAD_INPUT])
def test_bad_input_in_a_large_body_gets_the_same_answer(
    unreached_gateway: Gateway, unreached_engine: EngineHandle, large_bodies: None, case: str, body: Any, path: str,
    code: str, param: str | None,
) -> None:
    raw = orjson.dumps({**body, "x_pad": PAD}) if isinstance(body, dict) else (
        body if isinstance(body, bytes) else orjson.dumps(body)) + b" " * len(PAD)
    assert len(raw) > LARGE
    response = post(unreached_gateway, raw, path)
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert (error["code"], error["param"], error["type"]) == (code, param, "invalid_request_error")
    assert engine_received(unreached_engine, ("/v1/chat/completions", "/v1/completions", "/tokenize")) == []


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
    large_body_state: LargeBodyState,
) -> None:
    settings.GATEWAY_LARGE_BODY_WORKERS, settings.GATEWAY_LARGE_BODY_QUEUE = 1, 2
    large_body_state.simulate_pending(3)  # as if three large bodies were being inspected
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
    large_body_state.simulate_pending(2)  # one slot free again
    assert post(fault_gateway, large).status_code == 200
    assert upstream.completions == 2


def test_a_large_body_with_a_length_goes_through_a_shared_memory_file_that_is_recycled(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, monkeypatch: pytest.MonkeyPatch,
    large_body_state: LargeBodyState,
) -> None:
    seen: list[str] = []

    def spy(path: str, *args: Any) -> Any:
        seen.append(path)
        return inspect_shared(path, *args)

    files = large_body_state.files
    monkeypatch.setattr(large_pool, "inspect_shared", spy)
    monkeypatch.setattr(POOL, "_executor_for", lambda workers, niceness: InlineExecutor())  # the spy runs here
    raw = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": PAD * 2}], "x_vendor": [1.50, "é"]})
    response = post(fault_gateway, raw)
    assert response.status_code == 200, response.text
    assert len(seen) == 1 and seen[0].startswith(os.path.join(shared.SHARED_DIR, shared.SHARED_PREFIX))
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


def test_idle_shared_files_are_bounded_and_the_rest_discarded(
    monkeypatch: pytest.MonkeyPatch, large_body_state: LargeBodyState,
) -> None:
    mib = 1024 * 1024
    files = large_body_state.files
    monkeypatch.setattr(shared, "SHARED_IDLE_MAX", 3 * mib)

    def written(size: int) -> shared.SharedBody:
        body = shared.SharedBody.create(size)
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
    again = shared.SharedBody.create(mib + 1)
    assert again is not None and again.file is files_of[1] and files.idle == [files_of[0]]
    del again
    files.clear()
    wait_for(lambda: discarded(files_of[0].path) and discarded(files_of[1].path), what="the idle files to be discarded")


def test_a_shared_body_holds_only_the_bytes_it_was_sent_and_a_full_dev_shm_is_503(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    announced = shared.SharedBody.create(16 * 1024 * 1024)  # a client announces 16 MB, sends one byte
    assert announced is not None
    announced.write(b"{")
    assert os.fstat(announced.file.fd).st_blocks * 512 <= 8192

    def full(fd: int, data: bytes, offset: int) -> int:
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)  # a full tmpfs cannot be made here without filling the machine's
    with pytest.raises(GatewayError) as refused:
        announced.write(b'"model"')
    assert (refused.value.status, refused.value.code, refused.value.retry_after_s) == (503, "server_busy", 1)
    full_error = refused.value.__context__
    assert isinstance(full_error, OSError) and full_error.errno == errno.ENOSPC
    # pytest keeps the logged warning, whose error's traceback holds the body: let it go, so
    # its file is removed after the test (large_body_state checks it is).
    full_error.__traceback__ = None


def test_without_shared_memory_a_large_body_is_read_into_the_process_and_forwarded_the_same(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Any,
) -> None:
    monkeypatch.setattr(shared, "SHARED_DIR", str(tmp_path / "missing"))
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


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_large_bodies_are_read_at_the_budgets_pace_while_small_requests_go_on(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, settings: Any, framing: str,
) -> None:
    rate = 250_000
    settings.GATEWAY_LARGE_BODY_BYTES_PER_S = rate
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
    wait_for(lambda: large_pool.HELD.held >= 16_384 * 30 - LARGE, what="the first body held")
    if framing == "content-length":
        assert large_pool.HELD.held == len(first)  # its announced length, held before its bytes came
    else:
        assert large_pool.HELD.held < len(first)  # what has come of it so far
    refused = send(second)
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"]["code"] == "server_busy" and refused.headers["retry-after"] == "1"
    assert post(fault_gateway, {"model": "qwen", "messages": [{"role": "user", "content": "hi"}]}).status_code == 200
    go_on.set()
    poster.join(30)
    assert answers == [200]  # alone past the bound as it grew: a body alone is never refused
    assert large_pool.HELD.held == 0  # given back: the answered body and the refused one
    assert send(second).status_code == 200
    assert large_pool.HELD.held == 0
    assert upstream.completions == 3  # the small one, the first and the second's retry; never the refused try
    assert upstream.raw_bodies[-1] == second.replace(b'"model":"qwen"', b'"model":"qwen-test"')


def test_one_large_body_is_let_in_whatever_the_held_bound(
    fault_gateway: Gateway, upstream: CountingUpstream, large_bodies: None, settings: Any,
) -> None:
    settings.GATEWAY_LARGE_BODY_HELD_MAX_BYTES = 10_000  # smaller than the body: a misconfiguration
    raw = orjson.dumps({"model": "qwen", "messages": [{"role": "user", "content": PAD * 20}]})
    assert post(fault_gateway, raw).status_code == 200
    assert upstream.completions == 1 and large_pool.HELD.held == 0

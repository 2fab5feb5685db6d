"""Log line hygiene without a database: splitting, caps, invalid UTF-8, redaction."""

from __future__ import annotations

from jobs.logtext import REDACTED, LineSplitter, clean_line, redact


def test_splitter_returns_complete_lines_across_chunks():
    splitter = LineSplitter()
    assert splitter.feed(b"one\ntw") == [(b"one", 0)]
    assert splitter.feed(b"o\nthree") == [(b"two", 0)]
    assert splitter.close() == [(b"three", 0)]
    assert splitter.close() == []


def test_splitter_keeps_only_the_head_of_a_huge_line_and_counts_the_rest():
    splitter = LineSplitter(max_bytes=10)
    assert splitter.feed(b"a" * 600_000) == []
    lines = splitter.feed(b"a" * 500_000 + b"\nnext\n")
    assert lines == [(b"a" * 10, 1_099_990), (b"next", 0)]
    assert len(splitter.buffer) == 0


def test_invalid_utf8_is_replaced_not_fatal():
    assert clean_line(b"bad \xff\xfe ok\n") == "bad \ufffd\ufffd ok"


def test_nul_bytes_are_replaced_because_postgresql_cannot_store_them():
    assert "\x00" not in clean_line(b"a\x00b")


def test_a_long_line_is_cut_with_a_note_of_what_was_dropped():
    text = clean_line(b"x" * 20_000, max_chars=100)
    assert text.startswith("x" * 100) and "[line truncated: 19,900 more bytes]" in text


def test_carriage_return_progress_keeps_the_last_frame():
    assert clean_line(b"10%\r50%\r100%\n") == "100%"


def test_redact_hides_known_values_and_secret_shapes():
    assert redact("token is abcd1234efgh", ["abcd1234efgh"]) == f"token is {REDACTED}"
    assert redact("-e HF_TOKEN=hf_abcdefghijklmnopqrstu") == f"-e HF_TOKEN={REDACTED}"
    assert redact("Authorization: Bearer sk-abcdefghijklmnopqrstuvwx") == f"Authorization: Bearer {REDACTED}"
    assert redact("password: hunter2") == f"password: {REDACTED}"
    assert redact("-----BEGIN OPENSSH PRIVATE KEY-----") == REDACTED
    assert redact("NCCL_IB_HCA=rocep1s0f0 --max-model-len 32768") == "NCCL_IB_HCA=rocep1s0f0 --max-model-len 32768"

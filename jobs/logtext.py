"""Turning raw process output into log lines: split into lines, cap the length, replace
invalid UTF-8, redact secrets. Pure functions, no I/O (tested without a database)."""

from __future__ import annotations

import re
from collections.abc import Iterable

# A 1 MB line must not blow up the page, the channel layer or the database row.
DEFAULT_MAX_LINE = 8192

# KEY=value / KEY: value where the key names a secret (HF_TOKEN=..., api_key: ...)
_KEY_VALUE = re.compile(
    r"(?i)\b([\w.-]*(?:token|secret|password|passwd|api_key|apikey|access_key|private_key)[\w.-]*)"
    r"(\s*[=:]\s*)(\"[^\"]*\"|'[^']*'|\S+)"
)
# Cheap first look (no leading wildcard to backtrack over): most lines stop here.
_KEY_VALUE_HINT = re.compile(r"(?:token|secret|passw|api_?key|access_key|private_key)[\w.-]*\s*[=:]")  # on lowered text
# (pattern, substring that must be present for it to match)
_SHAPES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"(?i)\b(Authorization:\s*(?:Bearer|Basic|Token)\s+)(\S+)"), "authorization"),
    (re.compile(r"(?i)\b(Bearer\s+)([A-Za-z0-9._~+/=-]{8,})"), "bearer"),
    (re.compile(r"\b(hf_)([A-Za-z0-9]{16,})"), "hf_"),
    (re.compile(r"\b(sk-)([A-Za-z0-9_-]{16,})"), "sk-"),
)
_PRIVATE_KEY_LINE = re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*")
REDACTED = "[redacted]"


def redact(text: str, secrets: Iterable[str] = ()) -> str:
    """Hide secret values: known ones (container env secrets) verbatim, others by shape.
    10,000 lines/s leaves a few microseconds per line: each shape is tried only when a
    cheap test says it could be there."""
    for secret in secrets:
        if secret and len(secret) >= 4 and secret in text:
            text = text.replace(secret, REDACTED)
    lowered = text.lower()
    if _KEY_VALUE_HINT.search(lowered):
        text = _KEY_VALUE.sub(lambda m: f"{m.group(1)}{m.group(2)}{REDACTED}", text)
    for pattern, trigger in _SHAPES:
        if trigger in lowered:
            text = pattern.sub(lambda m: f"{m.group(1)}{REDACTED}", text)
    if "PRIVATE KEY-----" in text:
        text = _PRIVATE_KEY_LINE.sub(REDACTED, text)
    return text


def clean_line(raw: bytes, *, max_chars: int = DEFAULT_MAX_LINE, dropped: int = 0) -> str:
    """Decode (invalid UTF-8 → U+FFFD), drop the line ending and characters PostgreSQL
    cannot store (NUL), and cap the length with a note of how much was cut."""
    text = raw.decode("utf-8", errors="replace").rstrip("\r\n").replace("\x00", "\ufffd")
    if "\r" in text:  # progress bars redraw with \r: keep what was last drawn
        text = text.rsplit("\r", 1)[-1] or text.replace("\r", "")
    cut = dropped
    if len(text) > max_chars:
        cut += len(text.encode("utf-8", errors="replace")) - len(text[:max_chars].encode("utf-8", errors="replace"))
        text = text[:max_chars]
    if cut:
        text = f"{text} … [line truncated: {cut:,} more bytes]"
    return text


class LineSplitter:
    """Feeds chunks of a byte stream, yields complete lines (without unbounded buffering:
    a line longer than `max_bytes` is cut and the rest of it counted, not kept)."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_LINE * 4) -> None:
        self.max_bytes = max_bytes
        self.buffer = bytearray()
        self.dropped = 0  # bytes of the current line thrown away

    def feed(self, chunk: bytes) -> list[tuple[bytes, int]]:
        lines: list[tuple[bytes, int]] = []
        start = 0
        while True:
            newline = chunk.find(b"\n", start)
            piece = chunk[start:] if newline < 0 else chunk[start:newline]
            room = self.max_bytes - len(self.buffer)
            if len(piece) > room:
                self.buffer += piece[: max(room, 0)]
                self.dropped += len(piece) - max(room, 0)
            else:
                self.buffer += piece
            if newline < 0:
                return lines
            lines.append((bytes(self.buffer), self.dropped))
            self.buffer.clear()
            self.dropped = 0
            start = newline + 1

    def close(self) -> list[tuple[bytes, int]]:
        if not self.buffer and not self.dropped:
            return []
        line = (bytes(self.buffer), self.dropped)
        self.buffer.clear()
        self.dropped = 0
        return [line]

"""A request body cut from a large client body's raw bytes (gateway.large), sent
on in slices instead of as one joined copy.

Joining an 8 MB body into one `bytes` and handing it to the socket in one write holds the
event loop for milliseconds (a copy of 8 MB, then a write that copies as much into the
kernel): every small request of the process waits. A StreamedBody is a list of pieces —
literal bytes (the gateway's edits) and spans of the client's raw bytes — whose `chunks()`
yield at most SLICE bytes at a time (views of raw bytes in memory, or slices read from
the shared-memory file a large body was written to) and give the loop back between them.
Its length is known up front, so the upstream gets a `content-length`, not a chunked
body."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Protocol

SLICE = 256 * 1024

Piece = bytes | tuple[int, int]  # literal bytes, or raw[start:stop]


class Readable(Protocol):
    """Raw bytes kept outside the process's memory (gateway.shared_files.SharedBody)."""

    def __len__(self) -> int: ...

    def read(self, start: int, stop: int) -> bytes: ...


Raw = bytes | memoryview | Readable


class StreamedBody:
    def __init__(self, raw: Raw, pieces: Sequence[Piece]) -> None:
        self._raw: memoryview | Readable = memoryview(raw) if isinstance(raw, bytes | memoryview) else raw
        self._pieces = list(pieces)
        self.length = sum(len(piece) if isinstance(piece, bytes) else piece[1] - piece[0] for piece in self._pieces)

    def __len__(self) -> int:
        return self.length

    def join(self) -> bytes:
        """The whole body as one bytes (tests, and callers that need it whole)."""
        return b"".join(piece if isinstance(piece, bytes) else self._slice(*piece) for piece in self._pieces)

    def _slice(self, start: int, stop: int) -> bytes | memoryview:
        raw = self._raw
        return raw[start:stop] if isinstance(raw, memoryview) else raw.read(start, stop)

    async def chunks(self) -> AsyncIterator[bytes | memoryview]:
        """The body in slices of at most SLICE bytes, the event loop given back after each
        slice of the raw bytes (a socket that takes every write at once would otherwise let
        the whole body through in one go). Fresh on every call: a send that was refused
        before a byte left may be made again to another replica."""
        for piece in self._pieces:
            if isinstance(piece, bytes):
                if piece:
                    yield piece
                continue
            start, stop = piece
            while start < stop:
                end = min(stop, start + SLICE)
                yield self._slice(start, end)
                start = end
                await asyncio.sleep(0)


def edited(raw: Raw, edits: Sequence[tuple[int, int, bytes]]) -> StreamedBody:
    """`raw` with raw[start:stop] replaced by each edit's bytes (edits sorted, not overlapping;
    an insertion when start == stop)."""
    pieces: list[Piece] = []
    pos = 0
    for start, stop, value in edits:
        if start > pos:
            pieces.append((pos, start))
        pieces.append(value)
        pos = stop
    if pos < len(raw):
        pieces.append((pos, len(raw)))
    return StreamedBody(raw, pieces)

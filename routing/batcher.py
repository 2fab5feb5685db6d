"""Embedding queries for the event loop: never on the loop itself, identical queries from
a cache, and concurrent queries micro-batched into one forward pass.

No timer: the first query of an idle process runs at once (no added wait); queries that
arrive while a batch is running form the next batch. One encoder thread per process, so
batches do not fight each other for the two cores.

Batched by length: the waiting queries are sorted by length and cut into batches that pad
little (no text in a batch over SPREAD times its shortest), shortest first, under a bound
in padded tokens (BATCH_TOKENS): a short question never waits for, nor pads to, a pasted
log, and long prompts go in small batches (figures in docs/performance.md)."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from routing.encoder import Encoder, Vector

# Chosen with perf/router.py (32 concurrent clients, short, long and mixed prompts).
# Padded tokens per forward pass: 32 short prompts, 4 of 256 tokens. Long prompts gain nothing
# from big batches on this CPU: 32 prompts of 225 tokens embedded 15.5/s one at a time,
# 11.3/s in batches of 4, 6.5/s of 8, 5.2/s of 32 (perf/router.py's prompts, 2 cores).
BATCH_TOKENS = 1024
SPREAD = 2.0  # the longest text of a batch is at most this many times its shortest
MAX_SKIPS = 2  # passes a waiting text may be passed over for shorter ones before it goes next
CHARS_PER_TOKEN = 4  # a length estimate before tokenizing (English and code: 3-5)


def length_batches(texts: list[str], *, max_batch: int, max_tokens: int, batch_tokens: int = BATCH_TOKENS,
                   spread: float = SPREAD) -> list[list[str]]:
    """Texts grouped for forward passes: sorted by estimated tokens, a batch closes at
    max_batch texts, at batch_tokens padded tokens, or before a text over `spread` times
    the batch's shortest. Pure: the bench and the tests call it."""
    def tokens(text: str) -> int:
        return max(1, min(max_tokens, len(text) // CHARS_PER_TOKEN + 2))

    batches: list[list[str]] = []
    current: list[str] = []
    shortest = 0
    for text in sorted(texts, key=len):
        size = tokens(text)
        if current and (len(current) >= max_batch or size * (len(current) + 1) > batch_tokens
                        or size > spread * shortest):
            batches.append(current)
            current = []
        if not current:
            shortest = size
        current.append(text)
    if current:
        batches.append(current)
    return batches


class EmbeddingBatcher:
    def __init__(self, encoder: Encoder, *, max_batch: int = 32, cache_size: int = 4096,
                 batch_tokens: int = BATCH_TOKENS, spread: float = SPREAD) -> None:
        self.encoder = encoder
        self.max_batch = max_batch
        self.batch_tokens = batch_tokens
        self.spread = spread
        self.cache_size = cache_size
        self._cache: OrderedDict[str, Vector] = OrderedDict()
        self._pending: list[tuple[str, asyncio.Future[Vector]]] = []
        self._draining = False
        self._drain_task: asyncio.Task[None] | None = None  # held: the loop keeps only a weak reference
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="router-encoder")
        self.batches = 0  # forward passes run (the bench reads it)

    def cached(self, text: str) -> Vector | None:
        vector = self._cache.get(text)
        if vector is not None:
            self._cache.move_to_end(text)
        return vector

    async def embed(self, text: str) -> Vector:
        vector = self.cached(text)
        if vector is not None:
            return vector
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Vector] = loop.create_future()
        self._pending.append((text, future))
        if not self._draining:
            self._draining = True
            self._drain_task = loop.create_task(self._drain())
        return await future

    async def _drain(self) -> None:
        """One forward pass at a time, planned again after each from everything waiting: the
        batch of the shortest texts goes first, so a short question that arrives while long
        prompts are embedded waits for one pass, not for every batch planned before it came
        (which made mixed traffic slower batched than one at a time); a text passed over
        MAX_SKIPS times goes next whatever its length, so long prompts are never starved."""
        loop = asyncio.get_running_loop()
        skipped: dict[str, int] = {}
        try:
            while self._pending:
                waiting, self._pending = self._pending, []
                futures: dict[str, list[asyncio.Future[Vector]]] = {}
                for text, future in waiting:
                    futures.setdefault(text, []).append(future)
                batches = length_batches(list(futures), max_batch=self.max_batch, max_tokens=self.encoder.spec.max_tokens,
                                         batch_tokens=self.batch_tokens, spread=self.spread)
                chosen = next((batch for batch in batches if any(skipped.get(t, 0) >= MAX_SKIPS for t in batch)),
                              batches[0])
                taken = set(chosen)
                # The rest wait again, before what arrives during this pass (arrival order kept).
                self._pending = [(t, f) for t, f in waiting if t not in taken] + self._pending
                for text in futures:
                    if text in taken:
                        skipped.pop(text, None)
                    else:
                        skipped[text] = skipped.get(text, 0) + 1
                await self._run(loop, chosen, futures)
        finally:
            self._draining = False

    async def _run(self, loop: asyncio.AbstractEventLoop, texts: list[str],
                   futures: dict[str, list[asyncio.Future[Vector]]]) -> None:
        try:
            vectors = await loop.run_in_executor(self._executor, self.encoder.embed, texts)
        except Exception as exc:  # a broken model fails the queries, not the loop
            for text in texts:
                for future in futures[text]:
                    if not future.done():
                        future.set_exception(exc)
            return
        self.batches += 1
        for text, vector in zip(texts, vectors, strict=True):
            self._remember(text, vector)
            for future in futures[text]:
                if not future.done():
                    future.set_result(vector)

    def _remember(self, text: str, vector: Vector) -> None:
        self._cache[text] = np.asarray(vector, dtype=np.float32)
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def close(self) -> None:
        self._executor.shutdown(wait=False)

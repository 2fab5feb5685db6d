"""Embedding queries for the event loop: never on the loop itself, identical queries from
a cache, and concurrent queries micro-batched into one forward pass.

No timer: the first query of an idle process runs at once (no added wait); queries that
arrive while a batch is running form the next batch. One encoder thread per process, so
batches do not fight each other for the two cores."""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from routing.encoder import Encoder, Vector


class EmbeddingBatcher:
    def __init__(self, encoder: Encoder, *, max_batch: int = 32, cache_size: int = 4096) -> None:
        self.encoder = encoder
        self.max_batch = max_batch
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
        loop = asyncio.get_running_loop()
        try:
            while self._pending:
                batch, self._pending = self._pending[: self.max_batch], self._pending[self.max_batch :]
                texts = list(dict.fromkeys(text for text, _ in batch))
                try:
                    vectors = await loop.run_in_executor(self._executor, self.encoder.embed, texts)
                except Exception as exc:  # a broken model fails the queries, not the loop
                    for _, future in batch:
                        if not future.done():
                            future.set_exception(exc)
                    continue
                self.batches += 1
                found = {text: vectors[i] for i, text in enumerate(texts)}
                for text, vector in found.items():
                    self._remember(text, vector)
                for text, future in batch:
                    if not future.done():
                        future.set_result(found[text])
        finally:
            self._draining = False

    def _remember(self, text: str, vector: Vector) -> None:
        self._cache[text] = np.asarray(vector, dtype=np.float32)
        if len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    def close(self) -> None:
        self._executor.shutdown(wait=False)

"""The process's encoder and the embeddings of stored texts.

The encoder loads once per process from settings.ROUTER_MODEL_DIR. When the directory is
missing or wrong the router is off — the failure is kept and shown (pages, the gateway's
503 for model="auto", the startup log) — and everything else keeps working."""

from __future__ import annotations

import hashlib
import logging
import threading
from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from django.conf import settings

from routing.decision import Matrix
from routing.encoder import Encoder, EncoderUnavailable
from routing.models import TextEmbedding

log = logging.getLogger(__name__)

_lock = threading.Lock()
_loaded: dict[Path, Encoder | EncoderUnavailable] = {}


def router_encoder() -> Encoder:
    """The encoder, or EncoderUnavailable saying why the router is off."""
    directory = Path(settings.ROUTER_MODEL_DIR)
    found = _loaded.get(directory)
    if found is None:
        with _lock:
            found = _loaded.get(directory)
            if found is None:
                try:
                    found = Encoder(directory, threads=settings.ROUTER_THREADS)
                    log.info("router: encoder %s loaded from %s", found.id, directory)
                except EncoderUnavailable as exc:
                    log.error("router: model=auto is unavailable: %s (explicit lanes keep working)", exc)
                    found = exc
                _loaded[directory] = found
    if isinstance(found, EncoderUnavailable):
        raise found
    return found


def router_unavailable_reason() -> str | None:
    try:
        router_encoder()
    except EncoderUnavailable as exc:
        return str(exc)
    return None


def text_sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# Embeddings this process has already read or computed (bounded; a vector is 1.5 KB).
_memo: OrderedDict[tuple[str, str], np.ndarray[Any, np.dtype[np.float32]]] = OrderedDict()
MEMO_SIZE = 20_000


def stored_embeddings(encoder: Encoder, texts: Sequence[str], *,
                      on_progress: Callable[[int, int], None] | None = None) -> Matrix:
    """Rows aligned with `texts`: from this process's memo, else TextEmbedding, else computed
    (shortest first, so a batch pads little) and saved: a text is embedded once per encoder.
    `on_progress(embedded, to_embed)` after each batch computed (and once before the first)."""
    if not texts:
        return np.zeros((0, encoder.dim), dtype=np.float32)
    shas = [text_sha(text) for text in texts]
    found = {sha: _memo[(encoder.id, sha)] for sha in shas if (encoder.id, sha) in _memo}
    wanted = set(shas) - set(found)
    if wanted:
        found.update({
            row.text_sha: np.frombuffer(bytes(row.vector), dtype=np.float32)
            for row in TextEmbedding.objects.filter(encoder=encoder.id, text_sha__in=wanted)
        })
    missing = sorted(dict.fromkeys(text for text, sha in zip(texts, shas, strict=True) if sha not in found), key=len)
    if on_progress is not None:
        on_progress(0, len(missing))
    for start in range(0, len(missing), 32):
        chunk = missing[start : start + 32]
        vectors = encoder.embed(chunk)
        rows = []
        for text, vector in zip(chunk, vectors, strict=True):
            found[text_sha(text)] = vector
            rows.append(TextEmbedding(encoder=encoder.id, text_sha=text_sha(text), vector=vector.tobytes()))
        TextEmbedding.objects.bulk_create(rows, ignore_conflicts=True)
        if on_progress is not None:
            on_progress(start + len(chunk), len(missing))
    for sha in shas:
        _memo[(encoder.id, sha)] = found[sha]
    while len(_memo) > MEMO_SIZE:
        _memo.popitem(last=False)
    return np.stack([found[sha] for sha in shas]).astype(np.float32)

"""The router's sentence encoder: an ONNX model run by onnxruntime, its tokenizer by
`tokenizers`, both read from one local directory. Nothing is ever downloaded.

A model directory holds `model.onnx`, `tokenizer.json` and optionally `encoder.json`
(`{"pooling": "mean"|"cls", "max_tokens": 256, "query_prefix": ""}`; defaults fit
all-MiniLM-L6-v2; bge-small-en-v1.5 wants `"pooling": "cls"`). The encoder id is the
directory's name plus the model file's hash, so stored embeddings are recomputed only
when the model really changes."""

from __future__ import annotations

import hashlib
import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnxruntime as ort
from tokenizers import Tokenizer

Vector = np.ndarray[Any, np.dtype[np.float32]]


# More characters than any token of a sentence-embedding vocabulary spans in practice
# (WordPiece/BPE tokens of English and code average 3-5): the head-and-tail cut keeps
# this many per token it needs (perf/router.py checks the ids match the full pass).
CHARS_PER_TOKEN_BOUND = 10


class EncoderUnavailable(Exception):
    """The model directory is missing or wrong: the router is off and says why."""


@dataclass(frozen=True)
class EncoderSpec:
    pooling: str = "mean"
    max_tokens: int = 256
    query_prefix: str = ""


def _read_spec(directory: Path) -> EncoderSpec:
    path = directory / "encoder.json"
    if not path.exists():
        return EncoderSpec()
    try:
        raw = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise EncoderUnavailable(f"{path}: not valid JSON ({exc})") from exc
    unknown = set(raw) - {"pooling", "max_tokens", "query_prefix"}
    if unknown:
        raise EncoderUnavailable(f"{path}: unknown keys {sorted(unknown)}")
    spec = EncoderSpec(**raw)
    if spec.pooling not in ("mean", "cls"):
        raise EncoderUnavailable(f"{path}: pooling must be 'mean' or 'cls', got {spec.pooling!r}")
    if not isinstance(spec.max_tokens, int) or not 8 <= spec.max_tokens <= 8192:
        raise EncoderUnavailable(f"{path}: max_tokens must be a whole number from 8 to 8192")
    return spec


def session_options(threads: int, spinning: bool) -> ort.SessionOptions:
    """onnxruntime's options for the encoder: every graph optimisation, ops run one after
    another, `threads` intra-op threads (0: one per core), and — unless `spinning` — pool
    threads that sleep between ops instead of spinning: on a machine whose cores are busy a
    spinning thread takes a core from the rest of the process, and a parallel op waits for
    its slowest thread (chosen with perf/router_speed.py)."""
    options = ort.SessionOptions()
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    options.inter_op_num_threads = 1
    if threads:
        options.intra_op_num_threads = threads
    if not spinning:
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return options


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


class Encoder:
    """Embeds texts into L2-normalised float32 vectors (cosine = dot product)."""

    def __init__(self, directory: Path, *, threads: int = 0, spinning: bool = False) -> None:
        directory = Path(directory)
        if not directory.is_dir():
            raise EncoderUnavailable(f"router model directory {directory} does not exist")
        model_file, tokenizer_file = directory / "model.onnx", directory / "tokenizer.json"
        for needed in (model_file, tokenizer_file):
            if not needed.is_file():
                raise EncoderUnavailable(f"router model directory {directory} has no {needed.name}")
        self.spec = _read_spec(directory)
        try:
            self.tokenizer = Tokenizer.from_file(str(tokenizer_file))
        except Exception as exc:
            raise EncoderUnavailable(f"{tokenizer_file}: not a tokenizers file ({exc})") from exc
        # Some exported tokenizers pad every input to a fixed 128 tokens: a 9-token prompt
        # then costs ~45 ms instead of ~7 ms. Pad only to the longest text of each batch.
        self.tokenizer.no_padding()
        self.tokenizer.no_truncation()
        try:
            self.session = ort.InferenceSession(str(model_file), session_options(threads, spinning),
                                                providers=["CPUExecutionProvider"])
        except Exception as exc:
            raise EncoderUnavailable(f"{model_file}: onnxruntime cannot load it ({exc})") from exc
        self.input_names = {item.name for item in self.session.get_inputs()}
        self.output_names = [self.session.get_outputs()[0].name]  # the hidden states: no other output computed
        if not {"input_ids", "attention_mask"} <= self.input_names:
            raise EncoderUnavailable(
                f"{model_file}: expected inputs input_ids and attention_mask, found {sorted(self.input_names)}"
            )
        self.id = f"{directory.name}:{_file_digest(model_file)[:12]}"
        self.directory = directory
        self._lock = threading.Lock()
        probe = self.embed(["probe"])
        if probe.ndim != 2 or not np.isfinite(probe).all():
            raise EncoderUnavailable(f"{model_file}: the output is not a sentence embedding")
        self.dim = int(probe.shape[1])

    def tokenize(self, texts: list[str]) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        prefix = self.spec.query_prefix
        # A text far over the limit is cut to its head and tail in characters first, so a
        # 100K-character paste tokenizes ~2.5K characters, not all of it (2.15 s → ~1 ms).
        full = [prefix + t for t in texts]
        pieces = [self._char_head_and_tail(text) for text in full]
        # encode_batch even for one text: `encode` is no faster (perf/router_speed.py times both).
        encoded = iter(self.tokenizer.encode_batch([piece for parts in pieces for piece in parts]))
        rows = []
        for text, parts in zip(full, pieces, strict=True):
            if len(parts) == 1:
                rows.append(self._head_and_tail(next(encoded).ids))
            else:
                head_ids, tail_ids = next(encoded).ids, next(encoded).ids
                rows.append(self._join_head_and_tail(head_ids, tail_ids, text))
        longest = max(len(row) for row in rows)
        ids = np.zeros((len(texts), longest), dtype=np.int64)
        mask = np.zeros((len(texts), longest), dtype=np.int64)
        for index, row in enumerate(rows):
            ids[index, : len(row)] = row
            mask[index, : len(row)] = 1
        return ids, mask

    def _char_head_and_tail(self, text: str) -> list[str]:
        """The text, or its head and tail pieces cut on whitespace, each long enough to give
        more tokens than its half of the limit needs (a token is far under
        CHARS_PER_TOKEN_BOUND characters), so the tokens kept are the ones a full pass keeps."""
        budget = self.spec.max_tokens * CHARS_PER_TOKEN_BOUND // 2
        if len(text) <= 4 * budget:
            return [text]
        head_end = text.rfind(" ", budget, 2 * budget)
        tail_start = text.find(" ", len(text) - 2 * budget, len(text) - budget)
        if head_end < 0 or tail_start < 0:  # no whitespace to cut on: tokenize it all
            return [text]
        return [text[:head_end], text[tail_start + 1:]]

    def _join_head_and_tail(self, head_ids: list[int], tail_ids: list[int], text: str) -> list[int]:
        """Each piece was tokenized with its own special tokens ([CLS] … [SEP]): the head keeps
        its start, the tail its end, as _head_and_tail does on the whole text. Pieces too short
        for their half (tokens unusually long): the whole text, tokenized."""
        limit = self.spec.max_tokens
        head = limit // 2
        if len(head_ids) < head or len(tail_ids) < limit - head:
            return self._head_and_tail(self.tokenizer.encode(text).ids)
        return head_ids[:head] + tail_ids[len(tail_ids) - (limit - head):]

    def _head_and_tail(self, ids: list[int]) -> list[int]:
        """Over the limit, keep the start and the end: a long pasted text usually comes with
        its instruction before or after it, rarely in the middle."""
        limit = self.spec.max_tokens
        if len(ids) <= limit:
            return ids
        head = limit // 2
        return ids[:head] + ids[len(ids) - (limit - head):]

    def token_count(self, text: str) -> int:
        return len(self.tokenizer.encode(self.spec.query_prefix + text).ids)

    def embed(self, texts: list[str]) -> Vector:
        """One forward pass for the whole batch (padded to its longest text)."""
        if not texts:
            return np.zeros((0, getattr(self, "dim", 0)), dtype=np.float32)
        ids, mask = self.tokenize(texts)
        feeds = {"input_ids": ids, "attention_mask": mask}
        if "token_type_ids" in self.input_names:
            feeds["token_type_ids"] = np.zeros_like(ids)
        return self.pool(self.session.run(self.output_names, feeds)[0], mask)

    def pool(self, hidden: np.ndarray[Any, Any], mask: np.ndarray[Any, Any]) -> Vector:
        """The model's output → one L2-normalised vector per text (mean of its tokens' states,
        or its CLS state)."""
        if hidden.ndim == 3:
            if self.spec.pooling == "cls":
                pooled = hidden[:, 0, :]
            else:
                weights = mask[:, :, None].astype(np.float32)
                pooled = (hidden * weights).sum(axis=1) / np.maximum(weights.sum(axis=1), 1e-9)
        else:
            pooled = hidden
        norms = np.linalg.norm(pooled, axis=1, keepdims=True)
        return (pooled / np.maximum(norms, 1e-12)).astype(np.float32)

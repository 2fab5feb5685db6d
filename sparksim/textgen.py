"""Deterministic model output: readable text and tool-call arguments.

The same prompt and choice index always give the same tokens, so tests can compare runs.
"""

import json
import zlib
from collections.abc import Mapping, Sequence
from typing import Any, overload

from sparksim.tokenizer import split_tokens

CORPUS = (
    "The lane is healthy and both Sparks answer on the fabric. Prefill runs at about two "
    "thousand five hundred tokens per second, and decode holds near seventy tokens per "
    "second for one user. Keep the KV cache fixed with kv cache memory bytes, because the "
    "profiled budget moves between starts. Check that every RoCE device is active, that the "
    "MTU is nine thousand on both ends, and that the GID index points at the RoCE v2 IPv4 "
    "entry. When a request repeats a long prefix, the cache answers in a fraction of a "
    "second. Ten users share the GPU at about forty five tokens per second each. "
)
CORPUS_TOKENS = split_tokens(CORPUS)

# How long an answer runs before the simulated model emits end-of-sequence.
NATURAL_LENGTH_MIN = 24
NATURAL_LENGTH_SPAN = 200


def seed_for(prompt_ids: list[int], choice_index: int) -> int:
    head = ",".join(str(token) for token in prompt_ids[-64:])
    return zlib.crc32(f"{len(prompt_ids)}:{head}:{choice_index}".encode())


def natural_length(seed: int) -> int:
    return NATURAL_LENGTH_MIN + seed % NATURAL_LENGTH_SPAN


class CorpusTokens(Sequence[str]):
    """`count` tokens of the corpus from a seed's offset, computed when read: a choice of a
    million tokens (ignore_eos up to a 1M context) holds no list of a million strings."""

    def __init__(self, start: int, count: int) -> None:
        self.start = start
        self.length = count

    def __len__(self) -> int:
        return self.length

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> list[str]: ...

    def __getitem__(self, index: int | slice) -> str | list[str]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self.length))]
        if index < 0:
            index += self.length
        if not 0 <= index < self.length:
            raise IndexError(index)
        return CORPUS_TOKENS[(self.start + index) % len(CORPUS_TOKENS)]


def text_tokens(seed: int, count: int) -> CorpusTokens:
    return CorpusTokens(seed % len(CORPUS_TOKENS), count)


def example_value(schema: Mapping[str, Any]) -> Any:
    kind = schema.get("type")
    if "enum" in schema and schema["enum"]:
        return schema["enum"][0]
    if kind == "integer":
        return 1
    if kind == "number":
        return 1.5
    if kind == "boolean":
        return True
    if kind == "array":
        items = schema.get("items")
        return [example_value(items)] if isinstance(items, Mapping) else []
    if kind == "object":
        return example_object(schema)
    return "spark1"


def example_object(schema: Mapping[str, Any]) -> dict[str, Any]:
    properties = schema.get("properties") or {}
    required = schema.get("required") or list(properties)
    return {
        name: example_value(properties.get(name) or {})
        for name in required
        if isinstance(name, str)
    }


def tool_call_arguments(function: Mapping[str, Any]) -> str:
    parameters = function.get("parameters") or {}
    return json.dumps(example_object(parameters) if isinstance(parameters, Mapping) else {})


def chosen_tool(tools: list[Any], tool_choice: Any) -> Mapping[str, Any] | None:
    """The function the simulated model calls, or None when it answers in text."""
    if not tools or tool_choice == "none":
        return None
    functions = [
        tool["function"] for tool in tools if isinstance(tool, dict) and "function" in tool
    ]
    if isinstance(tool_choice, dict):
        wanted = (tool_choice.get("function") or {}).get("name")
        for function in functions:
            if function.get("name") == wanted:
                return dict(function)
    return dict(functions[0]) if functions else None

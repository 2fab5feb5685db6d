"""A deterministic, cheap tokenizer used everywhere a token count is needed.

A token is optional leading whitespace plus up to four non-space characters, so English text
comes out at roughly four characters per token, like real BPE vocabularies, and the same
text always gives the same count in /tokenize, usage and the timing model.
"""

import re
import zlib
from collections.abc import Sequence
from typing import Any

TOKEN_PATTERN = re.compile(r"\s*\S{1,4}|\s+")

# Chat templates wrap each message in role markers; vLLM counts them as prompt tokens.
TOKENS_PER_MESSAGE = 4
TOKENS_FOR_ASSISTANT_PRIMING = 3


def split_tokens(text: str) -> list[str]:
    return TOKEN_PATTERN.findall(text)


def count_tokens(text: str) -> int:
    return len(TOKEN_PATTERN.findall(text))


def token_id(token: str, vocab_size: int) -> int:
    # Reserve the first ids for special tokens, like real vocabularies do.
    return 16 + zlib.crc32(token.encode()) % (vocab_size - 16)


def token_ids(text: str, vocab_size: int) -> list[int]:
    return [token_id(token, vocab_size) for token in split_tokens(text)]


def message_text(content: Any) -> str:
    """The text of a chat message's content: a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, dict) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "".join(parts)
    return str(content)


def render_chat_prompt(messages: Sequence[Any], tools: Sequence[Any] | None = None) -> str:
    """The prompt text a chat template would produce (used for token ids and prefix caching)."""
    pieces: list[str] = []
    if tools:
        import json

        pieces.append("<|tools|>" + json.dumps(list(tools), sort_keys=True))
    for message in messages:
        if not isinstance(message, dict):
            continue
        pieces.append(f"<|{message.get('role', 'user')}|>")
        pieces.append(message_text(message.get("content")))
        for call in message.get("tool_calls") or []:
            function = call.get("function", {}) if isinstance(call, dict) else {}
            pieces.append(f"{function.get('name', '')}{function.get('arguments', '')}")
    pieces.append("<|assistant|>")
    return "\n".join(pieces)


def chat_prompt_token_ids(
    messages: Sequence[Any], vocab_size: int, tools: Sequence[Any] | None = None
) -> list[int]:
    text = render_chat_prompt(messages, tools)
    ids = token_ids(text, vocab_size)
    # Role markers are single special tokens in real templates; pad to the documented
    # per-message overhead so counts do not depend on marker spelling.
    overhead = TOKENS_PER_MESSAGE * len(messages) + TOKENS_FOR_ASSISTANT_PRIMING
    return [1, *ids, *([2] * max(0, overhead - len(messages) - 2))]


def completion_prompt_token_ids(prompt: str | Sequence[int], vocab_size: int) -> list[int]:
    if isinstance(prompt, str):
        return [1, *token_ids(prompt, vocab_size)]  # 1 = BOS, added like add_special_tokens
    return [int(token) for token in prompt]

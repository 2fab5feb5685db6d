"""OpenAI wire objects exactly as vLLM's server emits them (pure builders, no I/O)."""

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class ChoicePlan:
    """What one choice will say: text tokens, or one tool call streamed as argument pieces."""

    index: int
    tokens: Sequence[str]
    finish_reason: str
    tool_name: str | None = None
    tool_call_id: str = field(default_factory=lambda: f"chatcmpl-tool-{uuid.uuid4().hex}")
    reasoning_tokens: int = 0  # with a reasoning parser, the first tokens are "thinking"

    @property
    def text(self) -> str:
        return "".join(self.tokens[self.reasoning_tokens :])

    @property
    def reasoning(self) -> str | None:
        return "".join(self.tokens[: self.reasoning_tokens]) if self.reasoning_tokens else None


def error_body(message: str, error_type: str, code: int, param: str | None = None) -> str:
    return json.dumps(
        {"error": {"message": message, "type": error_type, "param": param, "code": code}}
    )


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, Any]:
    return {
        "prompt_tokens": prompt_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
        "completion_tokens": completion_tokens,
        "prompt_tokens_details": None,
    }


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


SSE_DONE = b"data: [DONE]\n\n"


class ChatStream:
    """Chunks of one streamed chat completion: the same id and created on every chunk."""

    def __init__(self, model: str, created: int, include_usage: bool) -> None:
        self.id = f"chatcmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = created
        self.include_usage = include_usage

    def chunk(self, index: int, delta: dict[str, Any], finish_reason: str | None) -> bytes:
        payload: dict[str, Any] = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": index,
                    "delta": delta,
                    "logprobs": None,
                    "finish_reason": finish_reason,
                    **({"stop_reason": None} if finish_reason else {}),
                }
            ],
        }
        if self.include_usage:
            payload["usage"] = None
        return sse(payload)

    def token_chunks(self, plan: ChoicePlan, position: int) -> bytes:
        """Chunks for the plan's token number `position` (1-based)."""
        last = position == len(plan.tokens)
        token = plan.tokens[position - 1]
        out = b""
        if position == 1:
            out += self.chunk(plan.index, {"role": "assistant", "content": ""}, None)
        if plan.tool_name is None:
            field_name = "reasoning_content" if position <= plan.reasoning_tokens else "content"
            out += self.chunk(plan.index, {field_name: token}, plan.finish_reason if last else None)
            return out
        if position == 1:
            header = {
                "index": 0,
                "id": plan.tool_call_id,
                "type": "function",
                "function": {"name": plan.tool_name, "arguments": ""},
            }
            out += self.chunk(plan.index, {"tool_calls": [header]}, None)
        fragment = {"index": 0, "function": {"arguments": token}}
        out += self.chunk(plan.index, {"tool_calls": [fragment]}, None)
        if last:
            out += self.chunk(plan.index, {}, plan.finish_reason)
        return out

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        return sse(
            {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage(prompt_tokens, completion_tokens),
            }
        )


class CompletionStream:
    def __init__(self, model: str, created: int, include_usage: bool) -> None:
        self.id = f"cmpl-{uuid.uuid4().hex}"
        self.model = model
        self.created = created
        self.include_usage = include_usage

    def token_chunks(self, plan: ChoicePlan, position: int) -> bytes:
        last = position == len(plan.tokens)
        payload: dict[str, Any] = {
            "id": self.id,
            "object": "text_completion",
            "created": self.created,
            "model": self.model,
            "choices": [
                {
                    "index": plan.index,
                    "text": plan.tokens[position - 1],
                    "logprobs": None,
                    "finish_reason": plan.finish_reason if last else None,
                    "stop_reason": None,
                }
            ],
        }
        if self.include_usage:
            payload["usage"] = None
        return sse(payload)

    def usage_chunk(self, prompt_tokens: int, completion_tokens: int) -> bytes:
        return sse(
            {
                "id": self.id,
                "object": "text_completion",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage(prompt_tokens, completion_tokens),
            }
        )


def chat_response(
    model: str, created: int, plans: list[ChoicePlan], prompt_tokens: int
) -> dict[str, Any]:
    choices = []
    for plan in plans:
        message: dict[str, Any] = {"role": "assistant", "reasoning_content": plan.reasoning}
        if plan.tool_name is None:
            message.update(content=plan.text, tool_calls=[])
        else:
            message.update(
                content=None,
                tool_calls=[
                    {
                        "id": plan.tool_call_id,
                        "type": "function",
                        "function": {"name": plan.tool_name, "arguments": plan.text},
                    }
                ],
            )
        choices.append(
            {
                "index": plan.index,
                "message": message,
                "logprobs": None,
                "finish_reason": plan.finish_reason,
                "stop_reason": None,
            }
        )
    return {
        "id": f"chatcmpl-{uuid.uuid4().hex}",
        "object": "chat.completion",
        "created": created,
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, sum(len(plan.tokens) for plan in plans)),
        "prompt_logprobs": None,
    }


def completion_response(
    model: str, created: int, plans: list[ChoicePlan], prompt_tokens: int
) -> dict[str, Any]:
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": created,
        "model": model,
        "choices": [
            {
                "index": plan.index,
                "text": plan.text,
                "logprobs": None,
                "finish_reason": plan.finish_reason,
                "stop_reason": None,
                "prompt_logprobs": None,
            }
            for plan in plans
        ],
        "usage": usage(prompt_tokens, sum(len(plan.tokens) for plan in plans)),
    }

"""Context guard: refuse a prompt the lane cannot hold before it is sent (a lane in
degraded mode holds less: 512K instead of 1M in the seed's RDMA watchdog).

A cheap bound decides most requests: a byte-level BPE token is at least one byte, so
the prompt's UTF-8 length (plus the chat template's overhead) is an upper bound on its
tokens. Only when that bound comes close to the limit does the gateway ask the lane's
own /tokenize for the exact count."""

from __future__ import annotations

from dataclasses import dataclass

TEMPLATE_OVERHEAD_PER_MESSAGE = 8


@dataclass(frozen=True)
class ContextCheck:
    upper_bound: int  # tokens the prompt can at most be
    needs_exact: bool  # the bound is close enough to the limit to ask /tokenize


def context_bound(*, prompt_bytes: int, messages: int, max_tokens: int, limit: int, threshold: float) -> ContextCheck:
    upper = prompt_bytes + TEMPLATE_OVERHEAD_PER_MESSAGE * max(messages, 1)
    return ContextCheck(upper_bound=upper, needs_exact=upper + max_tokens > limit * threshold)


def exceeds(prompt_tokens: int, *, max_tokens: int, limit: int) -> bool:
    return prompt_tokens + max_tokens > limit


def context_message(prompt_tokens: int, *, max_tokens: int, limit: int, estimated: bool, degraded: bool = False) -> str:
    # A degraded lane says so: the client should come back later, or send less.
    mode = " (degraded mode: the RDMA watchdog limits this lane while its fabric is slow)" if degraded else ""
    return (f"This model's maximum context length is {limit} tokens{mode}. However, you requested "
            f"{_requested(prompt_tokens, max_tokens, estimated)}. {_REDUCE}")


_REDUCE = "Please reduce the length of the messages or completion."


def _requested(prompt_tokens: int, max_tokens: int, estimated: bool) -> str:
    counted = "about " if estimated else ""
    return (f"{counted}{prompt_tokens + max_tokens} tokens ({prompt_tokens} in the messages, {max_tokens} in the "
            f"completion)")


def no_lane_holds_message(prompt_tokens: int, *, max_tokens: int, estimated: bool,
                          limits: list[tuple[str, int]]) -> str:
    """model="auto" with a prompt too long for every lane the key may use: each lane's limit."""
    each = ", ".join(f"{name} {limit}" for name, limit in sorted(limits, key=lambda item: item[1]))
    return (f"No lane this key may use can hold this request: you requested "
            f"{_requested(prompt_tokens, max_tokens, estimated)}, and the lanes' maximum context lengths are: "
            f"{each} tokens. {_REDUCE}")

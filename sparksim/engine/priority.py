"""vLLM's two scheduling policies (`--scheduling-policy`), as its V1 scheduler applies them.

fcfs (the default): the waiting queue is arrival order; a preempted request goes back to its
front; under KV pressure the newest running request is preempted.

priority: the waiting queue is a heap ordered by (priority, arrival time) — a lower value
first — and a preempted request is pushed back by that order too (a heap has no front);
under KV pressure the running request with the highest (priority, arrival time) is
preempted. Preemption happens only there: when the running set is full at max_num_seqs, a
waiting request of better priority waits for a running one to end (vLLM's waiting loop
stops at max_num_running_reqs; it never evicts a running request to admit a waiting one).
A preempted request is resumed by recompute: its prompt and the tokens it had generated are
prefilled again, and its stream goes on where it stopped.

A request's `priority` field with the fcfs policy: 0 is accepted, anything else is refused
as vLLM refuses it ("Got priority 1 but Priority scheduling is not enabled.", a 400)."""

from __future__ import annotations

import bisect
from collections import deque
from collections.abc import Iterable
from typing import Any, Protocol

from sparksim.engine.planning import ApiError, bad_request

FCFS, PRIORITY = "fcfs", "priority"


class Queued(Protocol):
    priority: int
    arrived_at: float
    admission: int


def request_priority(body: dict[str, Any], policy: str) -> int:
    """The body's `priority` (0 when absent), refused as vLLM refuses it."""
    value = body.get("priority", 0)
    if value is None:
        value = 0
    if isinstance(value, bool) or not isinstance(value, int):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        else:
            shown = repr(value) if len(repr(value)) <= 64 else repr(value)[:61] + "..."
            raise ApiError(400, f"[{{'type': 'int_type', 'loc': ('body', 'priority'), 'msg': 'Input should be a "
                                f"valid integer', 'input': {shown}}}]", "Bad Request", None)
    if value != 0 and policy != PRIORITY:
        raise bad_request(f"Got priority {value} but Priority scheduling is not enabled.")
    return value


def _order(request: Queued) -> tuple[int, float]:
    return request.priority, request.arrived_at


def enqueue(waiting: deque[Any], request: Queued, policy: str, *, preempted: bool = False) -> None:
    """A new request (at the back, or by priority), or a preempted one (the front, or by priority)."""
    if policy != PRIORITY:
        if preempted:
            waiting.appendleft(request)
        else:
            waiting.append(request)
        return
    keys = [_order(other) for other in waiting]
    waiting.insert(bisect.bisect_right(keys, _order(request)), request)


def victim(running: Iterable[Any], policy: str) -> Any:
    """The running request preempted when the KV pool is outgrown."""
    if policy == PRIORITY:
        return max(running, key=_order)
    return max(running, key=lambda request: request.admission)

"""Token budgets at the gateway: the period's window (a calendar day or month in the budgets'
time zone), the check before a request goes upstream and the charge after its answer, each
one Redis script over the hot path's own connection (gateway.scripts), so every web process
sees the same counts.

A request is refused once a budget it falls under has been used up (prompt, completion or
total tokens, each counted separately). Its tokens are only known after the answer, so a
budget can be overrun by the requests already in flight when it runs out — never by one
admitted after. Counts live in Redis under the budget's identity and the window, so an
admin's reset (deleting the window's count) and the next window both take effect at once."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Coroutine, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from django.conf import settings

from gateway.scripts import Script
from gateway.wire import GatewayError

log = logging.getLogger(__name__)

# The budgets' clock: tests replace it (gateway.budgets.clock) to cross a period's end.
clock: Callable[[], float] = time.time

COUNT_TTL_S = 40 * 86400  # a month's count outlives the month: the usage pages read it after
DIMENSIONS = {1: "prompt tokens", 2: "completion tokens", 3: "total tokens"}


@dataclass(frozen=True)
class BudgetInfo:
    """A budget as the hot path holds it (with its key, in gateway.directory.KeyInfo)."""

    identity: str  # its Redis name: the row's id and creation time (ids come back after a restore)
    owner: str  # "team agents" or "key review-agent": for the refusal's message
    period: str  # BudgetPeriod: day | month
    prompt: int = 0  # 0 = no limit
    completion: int = 0
    total: int = 0


def budget_identity(budget_id: int, created_at: datetime) -> str:
    return f"b{budget_id}-{int(created_at.timestamp())}"


def budget_zone() -> ZoneInfo:
    return ZoneInfo(settings.GATEWAY_BUDGET_TIME_ZONE)


def budget_window(period: str, now: datetime, zone: ZoneInfo) -> tuple[str, datetime]:
    """The window `now` falls in (its name) and when it ends, in `zone`'s calendar: midnight
    of the next day, or of the first of the next month (DST-safe: built from the date)."""
    local = now.astimezone(zone)
    if period == "day":
        name = local.strftime("%Y-%m-%d")
        following = local.date() + timedelta(days=1)
    else:
        name = local.strftime("%Y-%m")
        following = (local.date().replace(day=28) + timedelta(days=4)).replace(day=1)
    return name, datetime(following.year, following.month, following.day, tzinfo=zone)


def count_name(prefix: str, identity: str, window: str) -> str:
    return f"{prefix}:gw:budget:{identity}:{window}"


def budget_now() -> datetime:
    return datetime.fromtimestamp(clock(), UTC)


# KEYS: each budget's count in its current window (a hash: p = prompt, c = completion tokens)
# ARGV: per budget, its prompt, completion and total limits (0 = none)
# Reply: {0, 0, 0} within every budget; else {the budget's position (1-based), dimension, used}
CHECK_LUA = """
for i, name in ipairs(KEYS) do
  local used = redis.call('HMGET', name, 'p', 'c')
  local p, c = tonumber(used[1] or '0'), tonumber(used[2] or '0')
  local base = (i - 1) * 3
  local lp, lc, lt = tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2]), tonumber(ARGV[base + 3])
  if lp > 0 and p >= lp then return {i, 1, p} end
  if lc > 0 and c >= lc then return {i, 2, c} end
  if lt > 0 and p + c >= lt then return {i, 3, p + c} end
end
return {0, 0, 0}
"""

# KEYS: each budget's count in its current window; ARGV: 1 prompt tokens, 2 completion tokens, 3 ttl (s)
CHARGE_LUA = """
for _, name in ipairs(KEYS) do
  redis.call('HINCRBY', name, 'p', ARGV[1])
  redis.call('HINCRBY', name, 'c', ARGV[2])
  redis.call('EXPIRE', name, ARGV[3])
end
return 1
"""


class BudgetExceeded(GatewayError):
    """429 in OpenAI's shape, code `budget_exceeded`; when the budget resets in a header."""

    def __init__(self, budget: BudgetInfo, dimension: int, used: int, limit: int, resets_at: datetime,
                 now: datetime) -> None:
        what = DIMENSIONS[dimension]
        per = "daily" if budget.period == "day" else "monthly"
        super().__init__(
            429, f"The {per} budget of {budget.owner} is used up: {used} of {limit} {what}. "
                 f"It resets at {resets_at.isoformat()}.",
            code="budget_exceeded", type_="rate_limit_error",
            retry_after_s=max(1.0, (resets_at - now).total_seconds()), retryable=False)
        self.resets_at = resets_at

    def headers(self) -> list[tuple[bytes, bytes]]:
        return [*super().headers(), (b"x-budget-reset", self.resets_at.isoformat().encode())]


def _windows(budgets: Sequence[BudgetInfo], now: datetime) -> list[tuple[str, datetime]]:
    zone = budget_zone()
    return [budget_window(budget.period, now, zone) for budget in budgets]


async def budget_check(script: Script, budgets: Sequence[BudgetInfo]) -> None:
    """Before the upstream call: BudgetExceeded when any budget the key falls under is used up.
    No budget, no Redis call."""
    if not budgets:
        return
    now = budget_now()
    windows = _windows(budgets, now)
    names = [count_name(settings.REDIS_PREFIX, b.identity, window) for b, (window, _) in zip(budgets, windows, strict=True)]
    args = [limit for b in budgets for limit in (b.prompt, b.completion, b.total)]
    try:
        reply = await script(keys=names, args=args)
    except (ConnectionError, TimeoutError, OSError) as exc:
        log.warning("gateway: budgets not checked, Redis unreachable: %s", exc)
        raise GatewayError(503, "The gateway cannot check this API key's budget right now (its Redis is "
                           "unreachable); the request was not sent to any lane. Retry shortly.",
                           code="service_unavailable", type_="server_error", retry_after_s=2, retryable=True) from None
    position, dimension, used = (int(x) for x in reply)
    if position:
        budget = budgets[position - 1]
        limit = (budget.prompt, budget.completion, budget.total)[dimension - 1]
        raise BudgetExceeded(budget, dimension, used, limit, windows[position - 1][1], now)


def budget_charge(script: Script, spawn: Callable[[Coroutine[Any, Any, None]], None],
                  budgets: Sequence[BudgetInfo], *, prompt_tokens: int, completion_tokens: int) -> None:
    """After the answer (off the hot path): its tokens count against every budget it fell under."""
    if not budgets or prompt_tokens + completion_tokens <= 0:
        return
    windows = _windows(budgets, budget_now())
    names = [count_name(settings.REDIS_PREFIX, b.identity, window) for b, (window, _) in zip(budgets, windows, strict=True)]

    async def charge() -> None:
        try:
            await script(keys=names, args=[prompt_tokens, completion_tokens, COUNT_TTL_S])
        except Exception as exc:
            log.warning("gateway: %d + %d tokens not counted against budgets: %s", prompt_tokens,
                        completion_tokens, exc)

    spawn(charge())

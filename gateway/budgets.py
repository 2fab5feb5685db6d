"""Token budgets at the gateway: the period's window (a calendar day or month in the budgets'
time zone), the check before a request goes upstream and the charge after its answer. Both
run inside the hot path's two Redis scripts (gateway.scripts): the check is a function of the
admission script (gateway.limits.ADMIT_LUA), the charge one of the release script
(gateway.runtime.RELEASE_LUA), so budgets add no Redis call of their own and every web
process sees the same counts. Their definitions ride on the cached key (gateway.directory),
dropped in every process when one changes (gateway.team_services).

A request is refused once a budget it falls under has been used up (prompt, completion or
total tokens, each counted separately). Its tokens are only known after the answer, so a
budget can be overrun by the requests already in flight when it runs out — never by one
admitted after. Counts live in Redis under the budget's identity and the window, so an
admin's reset (deleting the window's count) and the next window both take effect at once.
A request is charged to the window it was admitted in."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

from django.conf import settings

from gateway.wire import GatewayError

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


def _window_span(period: str, now: datetime, zone: ZoneInfo) -> tuple[str, datetime, datetime]:
    """The window `now` falls in: its name, start and end, in `zone`'s calendar (DST-safe:
    built from the date)."""
    local = now.astimezone(zone)
    if period == "day":
        name = local.strftime("%Y-%m-%d")
        first = local.date()
        following = first + timedelta(days=1)
    else:
        name = local.strftime("%Y-%m")
        first = local.date().replace(day=1)
        following = (local.date().replace(day=28) + timedelta(days=4)).replace(day=1)
    return (name, datetime(first.year, first.month, first.day, tzinfo=zone),
            datetime(following.year, following.month, following.day, tzinfo=zone))


def budget_window(period: str, now: datetime, zone: ZoneInfo) -> tuple[str, datetime]:
    """The window `now` falls in (its name) and when it ends: midnight of the next day, or of
    the first of the next month."""
    name, _, end = _window_span(period, now, zone)
    return name, end


@dataclass(frozen=True)
class Window:
    name: str
    resets_at: datetime
    start_ts: float
    end_ts: float


# (period, zone name) -> its current window: the hot path computes a window once per period
# and zone, not per request (a request in the window's last instant may see the next one).
_current: dict[tuple[str, str], Window] = {}


def current_window(period: str, now_ts: float) -> Window:
    zone_name = settings.GATEWAY_BUDGET_TIME_ZONE
    window = _current.get((period, zone_name))
    if window is None or not window.start_ts <= now_ts < window.end_ts:
        name, start, end = _window_span(period, datetime.fromtimestamp(now_ts, UTC), ZoneInfo(zone_name))
        window = _current[(period, zone_name)] = Window(name, end, start.timestamp(), end.timestamp())
    return window


def count_name(prefix: str, identity: str, window: str) -> str:
    return f"{prefix}:gw:budget:{identity}:{window}"


def budget_now() -> datetime:
    return datetime.fromtimestamp(clock(), UTC)


@dataclass(frozen=True)
class BudgetCall:
    """A request's budgets as its two scripts take them: each one's count in the window the
    request was admitted in (KEYS), and its three limits (ARGV), in the key's budgets' order."""

    names: list[str]
    limits: list[int]
    windows: list[Window]
    now_ts: float


NO_BUDGETS = BudgetCall([], [], [], 0.0)


def budget_call(budgets: Sequence[BudgetInfo]) -> BudgetCall:
    """No budget: no work."""
    if not budgets:
        return NO_BUDGETS
    now_ts = clock()
    windows = [current_window(b.period, now_ts) for b in budgets]
    prefix = settings.REDIS_PREFIX
    return BudgetCall(names=[count_name(prefix, b.identity, w.name) for b, w in zip(budgets, windows, strict=True)],
                      limits=[limit for b in budgets for limit in (b.prompt, b.completion, b.total)],
                      windows=windows, now_ts=now_ts)


# Functions the hot path's two scripts start with (their KEYS from `first` on are the
# request's budget counts, hashes of p = prompt and c = completion tokens).
# budgets_used_up: ARGV from `first_arg` on, per budget its prompt, completion and total
# limits (0 = none). nil within every budget; else {its position (1-based), dimension, used}.
# budgets_charge: ARGV `first_arg`, +1: the answer's prompt and completion tokens, counted
# against every budget; +2: the counts' ttl (s). Nothing without budgets.
BUDGETS_LUA = """
local function budgets_used_up(first, first_arg)
  for i = first, #KEYS do
    local used = redis.call('HMGET', KEYS[i], 'p', 'c')
    local p, c = tonumber(used[1] or '0'), tonumber(used[2] or '0')
    local base = first_arg + (i - first) * 3
    local lp, lc, lt = tonumber(ARGV[base]), tonumber(ARGV[base + 1]), tonumber(ARGV[base + 2])
    local position = i - first + 1
    if lp > 0 and p >= lp then return {position, 1, p} end
    if lc > 0 and c >= lc then return {position, 2, c} end
    if lt > 0 and p + c >= lt then return {position, 3, p + c} end
  end
  return nil
end
local function budgets_charge(first, first_arg)
  if first > #KEYS then return end
  local prompt, completion = tonumber(ARGV[first_arg]), tonumber(ARGV[first_arg + 1])
  if prompt + completion <= 0 then return end
  for i = first, #KEYS do
    redis.call('HINCRBY', KEYS[i], 'p', prompt)
    redis.call('HINCRBY', KEYS[i], 'c', completion)
    redis.call('EXPIRE', KEYS[i], ARGV[first_arg + 2])
  end
end
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


def budget_refusal(budgets: Sequence[BudgetInfo], call: BudgetCall, position: int, dimension: int,
                   used: int) -> BudgetExceeded:
    """The admission script's budget refusal ({position, dimension, used}) as the client's 429."""
    budget = budgets[position - 1]
    limit = (budget.prompt, budget.completion, budget.total)[dimension - 1]
    return BudgetExceeded(budget, dimension, used, limit, call.windows[position - 1].resets_at,
                          datetime.fromtimestamp(call.now_ts, UTC))

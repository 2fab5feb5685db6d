"""Per-key limits, revocation and idempotency in Redis, shared by every web process.

Everything a request needs before it may go upstream is decided by one Lua script, in
one round trip: revoked?, a repeated Idempotency-Key?, requests per minute (sliding
window), tokens per minute, requests in flight. The window math also exists here as
plain functions (tested without Redis) and the script mirrors it line for line."""

from __future__ import annotations

from dataclasses import dataclass

from gateway.budgets import BUDGETS_LUA

WINDOW_S = 60.0


def sliding_count(previous: float, current: float, elapsed_in_window: float, window: float = WINDOW_S) -> float:
    """Requests (or tokens) in the last `window` seconds, estimated from two fixed windows:
    the previous one weighted by how much of it still overlaps."""
    overlap = max(0.0, 1.0 - elapsed_in_window / window)
    return previous * overlap + current


def seconds_until_below(
    limit: float, previous: float, current: float, elapsed_in_window: float, cost: float = 1.0, window: float = WINDOW_S
) -> float:
    """How long until `cost` more fits under `limit` (for retry-after), never less than
    the real wait. The previous window's weight falls linearly; when the current window
    ends, `current` becomes the previous one and weighs in again, fading over the next."""
    if sliding_count(previous, current, elapsed_in_window, window) + cost <= limit:
        return 0.0
    room = limit - current - cost
    if previous > 0 and room >= 0:
        # Still this window: previous*(1 - t/window) + current + cost <= limit.
        t = window * (1.0 - room / previous)
        if t < window:
            return max(0.0, t - elapsed_in_window)
    until_next = window - elapsed_in_window
    if current + cost <= limit or current <= 0:
        return until_next
    if cost > limit:
        return until_next + window
    # The next window: current*(1 - t/window) + cost <= limit.
    return until_next + window * (1.0 - (limit - cost) / current)


# Idempotency modes (ARGV 7): none, an explicit Idempotency-Key (check and register), an
# SDK retry without one (check the body's fingerprint and register), a first attempt
# (register its fingerprint only: two identical fresh requests both run).
IDEM_NONE = "0"
IDEM_EXPLICIT = "1"
IDEM_RETRY = "2"
IDEM_REGISTER = "3"

# Result codes of the script.
ALLOWED = 0
REVOKED = 1
IDEMPOTENT_IN_FLIGHT = 2
IDEMPOTENT_DONE = 3
RPM_EXCEEDED = 4
TPM_EXCEEDED = 5
PARALLEL_EXCEEDED = 6
IDEMPOTENCY_MISMATCH = 7
BUDGET_EXCEEDED = 8  # gateway.budgets: the record is "position,dimension,used"

FINGERPRINT_CHARS = 32

# KEYS: 1 revoked marker, 2 idempotency record, 3 rpm prefix, 4 tpm prefix, 5 in-flight zset,
#       6 the epoch marker (when this Redis's memory began: written the first time it is missing),
#       7... the key's token budgets' counts in their current windows (gateway.budgets)
# ARGV: 1 rpm limit (0 = none), 2 tpm limit, 3 max parallel, 4 request id,
#       5 idempotency ttl (ms), 6 in-flight lease (s), 7 idempotency mode (IDEM_*),
#       8 the body's fingerprint (FINGERPRINT_CHARS hex), 9... each budget's three limits
# A record is its kind ('I' in flight, 'D' done), the fingerprint of the body that made it,
# then the request id or the answer: the same Idempotency-Key with another body is refused.
# Budgets are checked after every other refusal (a refused request or a replay costs no
# tokens) and before anything is written, so a budget's refusal leaves nothing to take back.
ADMIT_LUA = BUDGETS_LUA + """
if redis.call('EXISTS', KEYS[1]) == 1 then return {1, 0, ''} end
if ARGV[7] == '1' or ARGV[7] == '2' then
  local record = redis.call('GET', KEYS[2])
  if record then
    if string.sub(record, 2, 33) ~= ARGV[8] then return {7, 0, ''} end
    if string.sub(record, 1, 1) == 'I' then return {2, 0, record} end
    return {3, 0, record}
  end
end
local t = redis.call('TIME')
local now = tonumber(t[1]) + tonumber(t[2]) / 1000000
local epoch = tonumber(redis.call('GET', KEYS[6]) or '')
if not epoch then
  epoch = now
  redis.call('SET', KEYS[6], tostring(now))
end
local window = 60
local slot = math.floor(now / window)
local elapsed = now - slot * window
local overlap = 1 - elapsed / window
local rpm, tpm, par = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local rpm_cur_key = KEYS[3] .. ':' .. slot
if rpm > 0 then
  local prev = tonumber(redis.call('GET', KEYS[3] .. ':' .. (slot - 1)) or '0')
  local cur = tonumber(redis.call('GET', rpm_cur_key) or '0')
  if prev * overlap + cur + 1 > rpm then
    return {4, tostring(elapsed), tostring(prev) .. ',' .. tostring(cur)}
  end
end
if tpm > 0 then
  local prev = tonumber(redis.call('GET', KEYS[4] .. ':' .. (slot - 1)) or '0')
  local cur = tonumber(redis.call('GET', KEYS[4] .. ':' .. slot) or '0')
  if prev * overlap + cur >= tpm then
    return {5, tostring(elapsed), tostring(prev) .. ',' .. tostring(cur)}
  end
end
if par > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[5], '-inf', now)
  if redis.call('ZCARD', KEYS[5]) >= par then return {6, 0, ''} end
end
local over = budgets_used_up(7, 9)
if over then return {8, 0, string.format('%d,%d,%d', over[1], over[2], over[3])} end
if rpm > 0 then
  redis.call('INCR', rpm_cur_key)
  redis.call('EXPIRE', rpm_cur_key, window * 2 + 5)
end
if par > 0 then
  redis.call('ZADD', KEYS[5], now + tonumber(ARGV[6]), ARGV[4])
  redis.call('EXPIRE', KEYS[5], tonumber(ARGV[6]) + 5)
end
if ARGV[7] ~= '0' then redis.call('SET', KEYS[2], 'I' .. ARGV[8] .. ARGV[4], 'PX', ARGV[5]) end
return {0, tostring(now - epoch), ''}
"""


@dataclass(frozen=True)
class Admission:
    code: int
    retry_after_s: float = 0.0
    record: bytes = b""
    memory_age_s: float = 0.0  # admitted: how long this Redis has kept its memory (the epoch marker's age)


def admission_from_reply(reply: list[object], *, rpm: int, tpm: int) -> Admission:
    """Turn the script's reply into an Admission (retry-after computed here, in Python)."""
    code = int(reply[0])  # type: ignore[call-overload]
    raw_record = reply[2]
    record = raw_record if isinstance(raw_record, bytes) else str(raw_record).encode()
    if code in (RPM_EXCEEDED, TPM_EXCEEDED):
        elapsed = float(reply[1])  # type: ignore[arg-type]
        previous, current = (float(x) for x in record.decode().split(","))
        if code == RPM_EXCEEDED:
            wait = seconds_until_below(rpm, previous, current, elapsed)
        else:
            # The script refuses at the limit itself (count >= tpm): the count must fall below it.
            wait = seconds_until_below(tpm, previous, current, elapsed, cost=0.001)
        return Admission(code, retry_after_s=max(wait, 0.5))
    if code == PARALLEL_EXCEEDED:
        return Admission(code, retry_after_s=1.0)
    if code == ALLOWED:
        return Admission(code, memory_age_s=float(reply[1]))  # type: ignore[arg-type]
    return Admission(code, record=record)


def stored_record(kind_and_rest: bytes, fingerprint: str) -> bytes:
    """A record as Redis keeps it: kind, the body's fingerprint, the rest."""
    return kind_and_rest[:1] + fingerprint.encode() + kind_and_rest[1:]


def record_content(stored: bytes) -> bytes:
    """A stored record without its fingerprint."""
    return stored[:1] + stored[1 + FINGERPRINT_CHARS:]

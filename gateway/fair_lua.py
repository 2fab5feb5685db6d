"""The fair queue's Redis scripts (gateway.fair): one replica's slots, queues and counters,
changed atomically by every web worker."""

# KEYS: 1 slots zset (rid → lease end ms), 2 interactive queue, 3 batch queue (rid → when queued, ms),
#       4 enqueue times (rid → ms), 5 heartbeats (rid → ms), 6 counters hash (flow → its work so far,
#       '_v' the virtual time; '_s:' .. key and '_sv:' .. flow inside a team), 7 waiters' wake channels
#       (rid → channel), 8 stats hash ('svc': the replica's mean slot time ms, 'svc:' .. key: a key's,
#       'shed', 'seq': the order requests came in), 9 flows (rid → flow, held; '#r:' .. rid → 'flow key class weight key-weight' while
#       queued; '#c:' .. rid → what it was charged, while held; '#q:' .. flow → its requests queued),
#       10 active flows (flow → its latest request, ms)
# Order (virtual counters, as in VTC — Sheng et al., "Fairness in Serving Large Language Models"):
# each flow (a key, or a team) has a counter of the work it was given ÷ its weight; a free slot
# goes to the queued flow of the lowest counter (KEYS[1] .. ':fl:' .. class: flow → counter), and
# inside it to its key of the lowest key counter (':kq:' .. flow .. ':' .. class: key → counter;
# a key of no team is its flow's one key), and that key's oldest request (':rq:' .. key .. ':' ..
# class: rid → its turn in 'seq'). Work is slot time: a request granted is charged its key's mean slot time
# so far (else the replica's mean, else 1 s) and set right by what it really held when its slot is
# given back (a slot left unused costs nothing, a place in the queue nothing). The order is decided
# when a slot frees, from the counters as they are then: a key of short requests sent often stays
# ahead of a key of long streams, as a key of one request does. A flow with nothing queued is lifted
# to V (the counter of the latest flow given a slot) when it queues again: credit does not build up
# while idle, and a light key's request lands ahead of a flooder's queue.
# The headroom (RESERVE, ACTIVE_MS, set by each script from its ARGV): while a flow is idle —
# active (a request under ACTIVE_MS ago) but holding no slot and with none queued — the last
# RESERVE slots are kept for its next request: a flow that holds some waits for them. vLLM
# never evicts a running request to admit a waiting one, so a slot kept free is how a light
# flow's next request starts at once. Flows that all have requests queued share every slot.
COMMON_LUA = """
local RESERVE, ACTIVE_MS = 0, 0
local KEEP_MS = 7200000  -- a queue's keys outlive the longest wait (GATEWAY_FAIR_MAX_WAIT_S ≤ 1 h)
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function words(text)
  local out = {}
  for part in string.gmatch(text, '%S+') do out[#out + 1] = part end
  return out
end
local function flows_q(class) return KEYS[1] .. ':fl:' .. class end
local function keys_q(flow, class) return KEYS[1] .. ':kq:' .. flow .. ':' .. class end
local function requests_q(key, class) return KEYS[1] .. ':rq:' .. key .. ':' .. class end
local function counter(name) return tonumber(redis.call('HGET', KEYS[6], name) or '0') end
local function set_counter(flow, value)  -- a flow's counter, and its place in both classes' orders
  redis.call('HSET', KEYS[6], flow, value)
  for _, class in ipairs({'i', 'b'}) do redis.call('ZADD', flows_q(class), 'XX', value, flow) end
end
local function set_key_counter(flow, key, value)
  redis.call('HSET', KEYS[6], '_s:' .. key, value)
  for _, class in ipairs({'i', 'b'}) do redis.call('ZADD', keys_q(flow, class), 'XX', value, key) end
end
local function forget(rid)  -- out of every queue (a queued request, granted or gone)
  local queued = redis.call('HGET', KEYS[9], '#r:' .. rid)
  if queued then
    local r = words(queued)
    local flow, key, class = r[1], r[2], r[3]
    local rq = requests_q(key, class)
    redis.call('ZREM', rq, rid)
    if redis.call('ZCARD', rq) == 0 then
      local kq = keys_q(flow, class)
      redis.call('ZREM', kq, key)
      if redis.call('ZCARD', kq) == 0 then redis.call('ZREM', flows_q(class), flow) end
    end
    redis.call('HDEL', KEYS[9], '#r:' .. rid)
    if redis.call('HINCRBY', KEYS[9], '#q:' .. flow, -1) <= 0 then redis.call('HDEL', KEYS[9], '#q:' .. flow) end
  end
  redis.call('ZREM', KEYS[2], rid)
  redis.call('ZREM', KEYS[3], rid)
  redis.call('ZREM', KEYS[4], rid)
  redis.call('ZREM', KEYS[5], rid)
  redis.call('HDEL', KEYS[7], rid)
end
local function sweep(now)
  for _, rid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 64)) do
    redis.call('ZREM', KEYS[1], rid)
    redis.call('HDEL', KEYS[9], rid, '#c:' .. rid)
  end
  for _, rid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 64)) do
    forget(rid)
    if not redis.call('ZSCORE', KEYS[1], rid) then redis.call('HDEL', KEYS[9], rid, '#c:' .. rid) end
  end
end
local function svc() return tonumber(redis.call('HGET', KEYS[8], 'svc') or '0') end
local function estimate(key)  -- the slot time a request of this key is expected to hold (ms)
  local own = tonumber(redis.call('HGET', KEYS[8], 'svc:' .. key) or '0')
  if own > 0 then return own end
  local mean = svc()
  return mean > 0 and mean or 1000
end
-- A slot given to a request: V moves on to its flow's counter, and its flow's and key's counters
-- by the work it is expected to take (its charge, kept to be set right when the slot comes back).
local function grant(rid, flow, key, weight, key_weight, now, lease)
  local cost = estimate(key)
  local c, ck = counter(flow), counter('_s:' .. key)
  if c > counter('_v') then redis.call('HSET', KEYS[6], '_v', c) end
  if ck > counter('_sv:' .. flow) then redis.call('HSET', KEYS[6], '_sv:' .. flow, ck) end
  set_counter(flow, c + cost / tonumber(weight))
  set_key_counter(flow, key, ck + cost / tonumber(key_weight))
  redis.call('HSET', KEYS[9], rid, flow, '#c:' .. rid, table.concat({flow, weight, cost, key, key_weight}, ' '))
  redis.call('ZADD', KEYS[1], now + lease, rid)
  redis.call('PEXPIRE', KEYS[6], KEEP_MS)
end
-- A request's charge set right when its slot (or a slot it never used) is given back: the
-- counters move by the slot time it held instead of the one it was charged; a slot held updates
-- its key's mean slot time.
local function settle(rid, held)
  local c = redis.call('HGET', KEYS[9], '#c:' .. rid)
  if not c then return end
  redis.call('HDEL', KEYS[9], '#c:' .. rid)
  local f = words(c)
  local flow, weight, charged, key, key_weight = f[1], tonumber(f[2]), tonumber(f[3]), f[4], tonumber(f[5])
  set_counter(flow, counter(flow) + (held - charged) / weight)
  set_key_counter(flow, key, counter('_s:' .. key) + (held - charged) / key_weight)
  if held > 0 then
    local mean = tonumber(redis.call('HGET', KEYS[8], 'svc:' .. key) or '0')
    redis.call('HSET', KEYS[8], 'svc:' .. key, mean > 0 and math.floor(mean * 0.8 + held * 0.2) or held)
  end
end
local function may_take(flow, now, cap)
  if RESERVE <= 0 or cap <= RESERVE or redis.call('ZCARD', KEYS[1]) < cap - RESERVE then return true end
  local holders = {}
  for _, rid in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    local f = redis.call('HGET', KEYS[9], rid)
    if f then holders[f] = true end
  end
  if not holders[flow] then return true end
  for _, f in ipairs(redis.call('ZRANGEBYSCORE', KEYS[10], now - ACTIVE_MS, '+inf')) do
    if f ~= flow and not holders[f] and not redis.call('HGET', KEYS[9], '#q:' .. f) then return false end
  end
  return true
end
-- The next request of a class: its queued flow of the lowest counter that may take a slot, that
-- flow's key of the lowest counter, its oldest request (an entry whose request is gone is dropped).
local function eligible(class, now, cap)
  for _, flow in ipairs(redis.call('ZRANGE', flows_q(class), 0, 63)) do
    if may_take(flow, now, cap) then
      for _ = 1, 8 do
        local key = redis.call('ZRANGE', keys_q(flow, class), 0, 0)[1]
        if not key then redis.call('ZREM', flows_q(class), flow) break end
        local rid = redis.call('ZRANGE', requests_q(key, class), 0, 0)[1]
        if rid and redis.call('HEXISTS', KEYS[9], '#r:' .. rid) == 1 then return rid end
        if rid then redis.call('ZREM', requests_q(key, class), rid)
        else redis.call('ZREM', keys_q(flow, class), key) end
      end
    end
  end
  return nil
end
local function dispatch(now, cap, lease, aging)
  local given = 0
  while redis.call('ZCARD', KEYS[1]) < cap do
    local pick = nil
    local oldest = redis.call('ZRANGE', KEYS[3], 0, 0, 'WITHSCORES')  -- aging: it goes next
    if oldest[1] and now - tonumber(oldest[2]) >= aging then
      local r = redis.call('HGET', KEYS[9], '#r:' .. oldest[1])
      if not r then forget(oldest[1]) elseif may_take(words(r)[1], now, cap) then pick = oldest[1] end
    end
    pick = pick or eligible('i', now, cap) or eligible('b', now, cap)
    if not pick then break end
    local r = words(redis.call('HGET', KEYS[9], '#r:' .. pick))
    local channel = redis.call('HGET', KEYS[7], pick)
    forget(pick)
    grant(pick, r[1], r[2], r[4], r[5], now, lease)
    if channel then redis.call('PUBLISH', channel, pick) end
    given = given + 1
  end
  return given
end
local function waiting() return redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]) end
local function share(flow)
  local held = 0
  for _, rid in ipairs(redis.call('ZRANGE', KEYS[1], 0, -1)) do
    if redis.call('HGET', KEYS[9], rid) == flow then held = held + 1 end
  end
  return {held, redis.call('ZCARD', KEYS[10])}
end
local function reply(code, queued, flow)
  if ARGV[13] ~= '1' then return {code, queued, svc()} end
  local s = share(flow)
  return {code, queued, svc(), s[1], s[2]}
end
"""

# ARGV: 1 rid, 2 flow, 3 weight, 4 class (i|b), 5 slots, 6 lease ms, 7 max queue, 8 wake channel,
#       9 heartbeat ms, 10 aging ms, 11 reserve, 12 active ms, 13 ranked (1: the lane's engine ranks by
#       priority), 14 the key inside a team's flow ('' for a key of no team), 15 its weight. Reply: {GRANTED|QUEUED|SHED, waiting, mean slot ms[, slots the flow holds, active flows]}
TAKE_LUA = COMMON_LUA + """
local now, cap, lease = now_ms(), tonumber(ARGV[5]), tonumber(ARGV[6])
RESERVE, ACTIVE_MS = tonumber(ARGV[11]), tonumber(ARGV[12])
local rid, flow, weight, class = ARGV[1], ARGV[2], ARGV[3], ARGV[4] == 'b' and 'b' or 'i'
local key, key_weight = ARGV[14] ~= '' and ARGV[14] or ARGV[2], ARGV[14] ~= '' and ARGV[15] or '1'
sweep(now)
redis.call('ZADD', KEYS[10], now, flow)
redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', now - ACTIVE_MS)
redis.call('PEXPIRE', KEYS[10], ACTIVE_MS + 60000)
dispatch(now, cap, lease, tonumber(ARGV[10]))
-- Nothing queued: lifted to V (and, inside a team, to the team's V), its idle time no credit.
if not redis.call('HGET', KEYS[9], '#q:' .. flow) and counter(flow) < counter('_v') then
  set_counter(flow, counter('_v'))
end
if not redis.call('ZSCORE', keys_q(flow, 'i'), key) and not redis.call('ZSCORE', keys_q(flow, 'b'), key)
   and counter('_s:' .. key) < counter('_sv:' .. flow) then
  set_key_counter(flow, key, counter('_sv:' .. flow))
end
local queued = waiting()
if queued == 0 and redis.call('ZCARD', KEYS[1]) < cap and may_take(flow, now, cap) then
  grant(rid, flow, key, weight, key_weight, now, lease)
  return reply(1, 0, flow)
end
if queued >= tonumber(ARGV[7]) then
  redis.call('HINCRBY', KEYS[8], 'shed', 1)
  return {2, queued, svc()}
end
redis.call('HSET', KEYS[9], '#r:' .. rid, table.concat({flow, key, class, weight, key_weight}, ' '))
redis.call('HINCRBY', KEYS[9], '#q:' .. flow, 1)
local rq, kq, fl = requests_q(key, class), keys_q(flow, class), flows_q(class)
redis.call('ZADD', rq, redis.call('HINCRBY', KEYS[8], 'seq', 1), rid)  -- first come, first served inside a key
redis.call('ZADD', kq, 'NX', counter('_s:' .. key), key)
redis.call('ZADD', fl, 'NX', counter(flow), flow)
for _, q in ipairs({rq, kq, fl}) do redis.call('PEXPIRE', q, KEEP_MS) end
redis.call('ZADD', class == 'b' and KEYS[3] or KEYS[2], now, rid)
redis.call('ZADD', KEYS[4], now, rid)
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[9]), rid)
redis.call('HSET', KEYS[7], rid, ARGV[8])
redis.call('PEXPIRE', KEYS[6], KEEP_MS)
-- A slot kept free for this flow (the headroom) is its own at once.
dispatch(now, cap, lease, tonumber(ARGV[10]))
if redis.call('ZSCORE', KEYS[1], rid) then return reply(1, 0, flow) end
return reply(0, queued + 1, flow)
"""

# A slot given back (or a place in the queue): ARGV 1 rid, 2 slots, 3 lease ms, 4 aging ms,
# 5 how long the slot was held (ms; 0: never used), 6 reserve, 7 active ms. Reply: how many waiters got a slot.
GIVE_LUA = COMMON_LUA + """
local now = now_ms()
RESERVE, ACTIVE_MS = tonumber(ARGV[6]), tonumber(ARGV[7])
local held = tonumber(ARGV[5])
if redis.call('ZREM', KEYS[1], ARGV[1]) == 1 and held > 0 then
  local mean = svc()
  redis.call('HSET', KEYS[8], 'svc', mean > 0 and math.floor(mean * 0.9 + held * 0.1) or held)
end
settle(ARGV[1], held)
forget(ARGV[1])
redis.call('HDEL', KEYS[9], ARGV[1])
sweep(now)
return dispatch(now, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
"""

# A waiter whose wait bound passed: ARGV 1 rid. Reply {GRANTED} when a slot came meanwhile
# (kept), else {SHED, waiting, mean slot ms} and its place is given up.
WITHDRAW_LUA = COMMON_LUA + """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {1, 0, 0} end
settle(ARGV[1], 0)
forget(ARGV[1])
redis.call('HDEL', KEYS[9], ARGV[1])
redis.call('HINCRBY', KEYS[8], 'shed', 1)
return {2, waiting(), svc()}
"""

# One worker's tick for one replica: ARGV 1 slots, 2 lease ms, 3 aging ms, 4 heartbeat ms, 5 reserve,
# 6 active ms, 7 how many waiters follow, then the waiters' rids, then the held slots' rids (their leases
# renewed; a slot taken without asking, FairQueue.under_half, is counted from its first tick).
# Reply: per waiter, 1 when it holds a slot now.
TICK_LUA = COMMON_LUA + """
local now, lease = now_ms(), tonumber(ARGV[2])
RESERVE, ACTIVE_MS = tonumber(ARGV[5]), tonumber(ARGV[6])
local waiters = tonumber(ARGV[7])
for i = 8 + waiters, #ARGV do redis.call('ZADD', KEYS[1], now + lease, ARGV[i]) end
for i = 8, 7 + waiters do redis.call('ZADD', KEYS[5], 'XX', now + tonumber(ARGV[4]), ARGV[i]) end
sweep(now)
dispatch(now, tonumber(ARGV[1]), lease, tonumber(ARGV[3]))
local out = {}
for i = 8, 7 + waiters do out[#out + 1] = redis.call('ZSCORE', KEYS[1], ARGV[i]) and 1 or 0 end
return out
"""

"""The fair queue's Redis scripts (gateway.fair): one replica's slots, queues and tags,
changed atomically by every web worker."""

# KEYS: 1 slots zset (rid → lease end ms), 2 interactive queue, 3 batch queue (rid → start tag),
#       4 enqueue times (rid → ms), 5 heartbeats (rid → ms), 6 tags hash ('_v' and flow → last finish),
#       7 waiters' wake channels (rid → channel), 8 stats hash (svc: mean slot time ms, shed),
#       9 flows (rid → flow, queued and held; '#q:' .. flow → its requests queued),
#       10 active flows (flow → its latest request, ms)
# Teams (two levels): a key of a team queues as the team's flow (the team's weight orders it
# against other flows) and, inside the team, by its own tag in the team's queue of its class
# (KEYS[1] .. ':tq:' .. team .. ':' .. class, rid → key tag; '#t:' .. rid names it in KEYS[9]);
# when the team's turn comes, the team's request of the lowest key tag takes it.
# The headroom (RESERVE, ACTIVE_MS, set by each script from its ARGV): while a flow is idle —
# active (a request under ACTIVE_MS ago) but holding no slot and with none queued — the last
# RESERVE slots are kept for its next request: a flow that holds some waits for them. vLLM
# never evicts a running request to admit a waiting one, so a slot kept free is how a light
# flow's next request starts at once. Flows that all have requests queued share every slot.
COMMON_LUA = """
local RESERVE, ACTIVE_MS = 0, 0
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function forget(rid)
  local tq = redis.call('HGET', KEYS[9], '#t:' .. rid)
  if tq then
    redis.call('ZREM', tq, rid)
    redis.call('HDEL', KEYS[9], '#t:' .. rid)
  end
  if redis.call('ZREM', KEYS[2], rid) + redis.call('ZREM', KEYS[3], rid) > 0 then
    local flow = redis.call('HGET', KEYS[9], rid)
    if flow and redis.call('HINCRBY', KEYS[9], '#q:' .. flow, -1) <= 0 then redis.call('HDEL', KEYS[9], '#q:' .. flow) end
  end
  redis.call('ZREM', KEYS[4], rid)
  redis.call('ZREM', KEYS[5], rid)
  redis.call('HDEL', KEYS[7], rid)
end
local function sweep(now)
  for _, rid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, 64)) do
    redis.call('ZREM', KEYS[1], rid)
    redis.call('HDEL', KEYS[9], rid)
  end
  for _, rid in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', now, 'LIMIT', 0, 64)) do
    forget(rid)
    if not redis.call('ZSCORE', KEYS[1], rid) then redis.call('HDEL', KEYS[9], rid) end
  end
end
local function grant(rid, start, now, lease)
  redis.call('ZADD', KEYS[1], now + lease, rid)
  if start > tonumber(redis.call('HGET', KEYS[6], '_v') or '0') then redis.call('HSET', KEYS[6], '_v', start) end
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
local function eligible(queue, now, cap)
  for _, rid in ipairs(redis.call('ZRANGE', queue, 0, 63)) do
    if may_take(redis.call('HGET', KEYS[9], rid) or '', now, cap) then return rid end
  end
  return nil
end
local function dispatch(now, cap, lease, aging)
  local given = 0
  while redis.call('ZCARD', KEYS[1]) < cap do
    local pick = nil
    local oldest = redis.call('ZRANGE', KEYS[3], 0, 0)[1]
    if oldest and now - tonumber(redis.call('ZSCORE', KEYS[4], oldest) or now) >= aging then
      pick = eligible(KEYS[3], now, cap)
    end
    pick = pick or eligible(KEYS[2], now, cap) or eligible(KEYS[3], now, cap)
    if not pick then break end
    local queue = redis.call('ZSCORE', KEYS[2], pick) and KEYS[2] or KEYS[3]
    local start = tonumber(redis.call('ZSCORE', queue, pick))
    local tq = redis.call('HGET', KEYS[9], '#t:' .. pick)
    if tq then  -- the team's turn: its request of the lowest key tag takes it, the other its place
      local best = redis.call('ZRANGE', tq, 0, 0)[1]
      if best and best ~= pick then
        redis.call('ZADD', queue, redis.call('ZSCORE', queue, best), pick)
        pick = best
      end
      redis.call('HSET', KEYS[6], '_sv:' .. (redis.call('HGET', KEYS[9], pick) or ''), redis.call('ZSCORE', tq, pick))
    end
    local channel = redis.call('HGET', KEYS[7], pick)
    forget(pick)
    grant(pick, start, now, lease)
    if channel then redis.call('PUBLISH', channel, pick) end
    given = given + 1
  end
  return given
end
local function waiting() return redis.call('ZCARD', KEYS[2]) + redis.call('ZCARD', KEYS[3]) end
local function svc() return tonumber(redis.call('HGET', KEYS[8], 'svc') or '0') end
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
sweep(now)
redis.call('ZADD', KEYS[10], now, ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[10], '-inf', now - ACTIVE_MS)
redis.call('PEXPIRE', KEYS[10], ACTIVE_MS + 60000)
dispatch(now, cap, lease, tonumber(ARGV[10]))
local start = math.max(tonumber(redis.call('HGET', KEYS[6], '_v') or '0'),
                       tonumber(redis.call('HGET', KEYS[6], ARGV[2]) or '0'))
local queued = waiting()
if queued == 0 and redis.call('ZCARD', KEYS[1]) < cap and may_take(ARGV[2], now, cap) then
  redis.call('HSET', KEYS[6], ARGV[2], start + 1 / tonumber(ARGV[3]))
  redis.call('HSET', KEYS[9], ARGV[1], ARGV[2])
  grant(ARGV[1], start, now, lease)
  return reply(1, 0, ARGV[2])
end
if queued >= tonumber(ARGV[7]) then
  redis.call('HINCRBY', KEYS[8], 'shed', 1)
  return {2, queued, svc()}
end
redis.call('HSET', KEYS[6], ARGV[2], start + 1 / tonumber(ARGV[3]))
redis.call('HSET', KEYS[9], ARGV[1], ARGV[2])
redis.call('HINCRBY', KEYS[9], '#q:' .. ARGV[2], 1)
redis.call('ZADD', ARGV[4] == 'b' and KEYS[3] or KEYS[2], start, ARGV[1])
if ARGV[14] ~= '' then
  local inner = math.max(tonumber(redis.call('HGET', KEYS[6], '_sv:' .. ARGV[2]) or '0'),
                         tonumber(redis.call('HGET', KEYS[6], '_s:' .. ARGV[14]) or '0'))
  redis.call('HSET', KEYS[6], '_s:' .. ARGV[14], inner + 1 / tonumber(ARGV[15]))
  local tq = KEYS[1] .. ':tq:' .. ARGV[2] .. ':' .. ARGV[4]
  redis.call('ZADD', tq, inner, ARGV[1])
  redis.call('PEXPIRE', tq, 3600000)
  redis.call('HSET', KEYS[9], '#t:' .. ARGV[1], tq)
end
redis.call('ZADD', KEYS[4], now, ARGV[1])
redis.call('ZADD', KEYS[5], now + tonumber(ARGV[9]), ARGV[1])
redis.call('HSET', KEYS[7], ARGV[1], ARGV[8])
redis.call('PEXPIRE', KEYS[6], 3600000)
-- A slot kept free for this flow (the headroom) is its own at once.
dispatch(now, cap, lease, tonumber(ARGV[10]))
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return reply(1, 0, ARGV[2]) end
return reply(0, queued + 1, ARGV[2])
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
forget(ARGV[1])
redis.call('HDEL', KEYS[9], ARGV[1])
sweep(now)
return dispatch(now, tonumber(ARGV[2]), tonumber(ARGV[3]), tonumber(ARGV[4]))
"""

# A waiter whose wait bound passed: ARGV 1 rid. Reply {GRANTED} when a slot came meanwhile
# (kept), else {SHED, waiting, mean slot ms} and its place is given up.
WITHDRAW_LUA = COMMON_LUA + """
if redis.call('ZSCORE', KEYS[1], ARGV[1]) then return {1, 0, 0} end
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

-- schedule_due: claim a batch of due schedules for one firer. Each claimed name's score
-- moves to now + lease, so firers racing for the due set take different schedules; the
-- fire script then sets its real next due time. A firer that dies leaves its claims to
-- come due again after the lease (nothing fired twice: schedule_fire compares the slot).
-- Arguments: ARG_* (signatures.ScheduleDue): most schedules to claim, lease (ms).
-- Returns: {now_ms, next_due_ms | -1, then 7 values per schedule: name, rev, next_slot,
--   cron, tz, catchup, catchup_limit, jitter_ms}; next_due_ms: the earliest due time left
--   in the set after this claim (-1: empty), for the firer's wait.
--- @include "now_ms"
--- @include "call_chunked"
local now = now_ms()
local names = redis.call('ZRANGEBYSCORE', K_SCHEDULE_DUE, '-inf', now, 'LIMIT', 0,
  tonumber(ARG_LIMIT))
local out = {now, -1}
local lease_until = now + tonumber(ARG_LEASE_MS)
local leased = {}
for _, name in ipairs(names) do
  local v = redis.call('HMGET', K_SCHEDULE .. name, 'rev', 'next_slot', 'cron', 'tz', 'catchup',
    'catchup_limit', 'jitter_ms', 'paused')
  if v[1] == false or v[8] == '1' or v[2] == '' or v[2] == false then
    redis.call('ZREM', K_SCHEDULE_DUE, name)  -- gone, paused or over: not due
  else
    leased[#leased + 1] = lease_until
    leased[#leased + 1] = name
    out[#out + 1] = name
    for i = 1, 7 do out[#out + 1] = v[i] or '' end
  end
end
if #leased > 0 then call_chunked('ZADD', K_SCHEDULE_DUE, leased) end
local first = redis.call('ZRANGE', K_SCHEDULE_DUE, 0, 0, 'WITHSCORES')
if first[2] then out[2] = tonumber(first[2]) end
return out

--- @include "output_end"
--- @include "event"
--- @include "bump"
--- @include "wake_waiters"
--- @include "flow_finished"
-- A task ends cancelled: never to run again (kept like a dead task, dead_retention_s).
local function to_cancelled(id, key, now)
  redis.call('ZADD', K_CANCELLED, now, id)
  redis.call('ZREM', K_DEADLINES, id)
  redis.call('HSET', key, 'state', 'cancelled', 'reason', 'cancelled', 'finished_at', now)
  bump('cancelled_total')
  event('cancelled', id)
  local v = redis.call('HMGET', key, 'waiters', 'dependants', 'flow', 'checkpoint_keep',
    'output')
  if not v[4] then redis.call('HDEL', key, 'checkpoint') end  -- kept only when asked
  output_end(id, 'cancelled', v[5])
  wake_waiters(id, key, v[1])
  flow_finished(id, 'c', v[2], nil, v[3])
end


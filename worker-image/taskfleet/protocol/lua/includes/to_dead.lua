--- @include "output_end"
--- @include "event"
--- @include "bump"
--- @include "wake_waiters"
--- @include "flow_finished"
local function to_dead(id, key, now, reason, err)
  redis.call('ZADD', K_DEAD, now, id)
  redis.call('ZREM', K_DEADLINES, id)
  if err ~= nil then
    redis.call('HSET', key, 'state', 'dead', 'reason', reason, 'finished_at', now, 'error', err)
  else
    redis.call('HSET', key, 'state', 'dead', 'reason', reason, 'finished_at', now)
  end
  bump('dead_total')
  event('dead', id)
  local v = redis.call('HMGET', key, 'waiters', 'dependants', 'flow', 'checkpoint_keep',
    'output')
  if not v[4] then redis.call('HDEL', key, 'checkpoint') end  -- kept only when asked
  output_end(id, 'dead', v[5])
  wake_waiters(id, key, v[1])
  flow_finished(id, 'x', v[2], nil, v[3])
end


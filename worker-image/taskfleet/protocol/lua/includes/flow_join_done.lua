--- @include "event"
--- @include "output_end"
--- @include "bump"
--- @include "wake_waiters"
--- @include "flow_finished"
-- A task whose handler returned while children it added were running (field 'join') is
-- done once the last of them is: done now, with the result its run stored (an earlier
-- attempt's error dropped: it is not this done task's).
local function flow_join_done(id, key, now)
  redis.call('ZREM', K_WAITING, id)
  redis.call('HDEL', key, 'deps_left', 'error')
  redis.call('HSET', key, 'state', 'done', 'finished_at', now)
  redis.call('ZADD', K_DONE, now, id)
  bump('completed')
  event('done', id)
  local v = redis.call('HMGET', key, 'waiters', 'dependants', 'result', 'flow', 'output')
  output_end(id, 'done', v[5])
  wake_waiters(id, key, v[1])
  flow_finished(id, 'd', v[2], v[3] or '', v[4])
end

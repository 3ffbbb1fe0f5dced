--- @include "to_pending"
-- A waiting task whose dependencies are all satisfied (flow_resolve, or repair for one
-- whose wake-up was lost) leaves waiting for pending, ready to run now.
local function flow_ready(id, key, now)
  redis.call('ZREM', K_WAITING, id)
  redis.call('HDEL', key, 'deps_left')
  redis.call('HSET', key, 'run_at', now)
  to_pending(id, key, false)
end

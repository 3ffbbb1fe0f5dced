--- @include "to_cancelled"
--- @include "pending_remove"
-- Cancel one task: pending, delayed or waiting -> cancelled at once ('cancelled'); running
-- -> 'cancel_requested' set, it ends cancelled when it leaves running ('requested');
-- finished -> unchanged ('done', 'dead', 'finished' when cancelled before); 'missing'.
local function cancel_task(id, key, now)
  local v = redis.call('HMGET', key, 'state', 'group')
  local state = v[1]
  if not state then return 'missing' end
  if state == 'pending' or state == 'delayed' or state == 'waiting' then
    pending_remove(id, v[2])
    redis.call('ZREM', K_DELAYED, id)
    if state == 'waiting' then redis.call('ZREM', K_WAITING, id) end
    to_cancelled(id, key, now)
    return 'cancelled'
  elseif state == 'running' then
    redis.call('HSETNX', key, 'cancel_requested', now)
    return 'requested'
  elseif state == 'cancelled' then
    return 'finished'
  end
  return state
end

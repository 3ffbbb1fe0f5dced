--- @include "bump"
--- @include "to_dead"
-- Tasks not started by their deadline -> dead, reason "expired".
local function expire_deadlines(now, limit)
  local ids = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', '(' .. now, 'LIMIT', 0, limit)
  local n = 0
  for _, id in ipairs(ids) do
    redis.call('ZREM', K_DEADLINES, id)
    local key = K_TASK .. id
    local state = redis.call('HGET', key, 'state')
    if state == 'pending' or state == 'delayed' then
      redis.call('ZREM', K_PENDING, id)
      redis.call('ZREM', K_DELAYED, id)
      to_dead(id, key, now, 'expired', 'not started before its deadline')
      bump('expired')
      n = n + 1
    end
  end
  return n
end


--- @include "pending_score"
--- @include "pending_add"
local function to_pending(id, key, front)
  local v = redis.call('HMGET', key, 'priority', 'group')
  pending_add(id, pending_score(tonumber(v[1]) or 0, front), v[2])
  redis.call('HSET', key, 'state', 'pending')
end

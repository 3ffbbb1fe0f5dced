--- @include "pending_score"
local function to_pending(id, key, front)
  local priority = tonumber(redis.call('HGET', key, 'priority')) or 0
  redis.call('ZADD', K_PENDING, pending_score(priority, front), id)
  redis.call('HSET', key, 'state', 'pending')
end


--- @include "to_pending"
-- Delayed tasks whose run_at has come -> pending (at most limit per call).
local function promote_due(now, limit)
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', K_DELAYED, id)
    local key = K_TASK .. id
    if redis.call('EXISTS', key) == 1 then to_pending(id, key, false) end
  end
  return #due
end


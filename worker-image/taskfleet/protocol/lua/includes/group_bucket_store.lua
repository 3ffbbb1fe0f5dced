-- group_bucket_store: write back what group_bucket_load read, and its expiry.
local function group_bucket_store(g, bt, bc, now, period_ms)
  local key = K_GROUP_BUCKET .. g
  redis.call('HSET', key, 'tasks', tostring(bt or ''), 'cost', tostring(bc or ''), 'ts', now)
  redis.call('PEXPIRE', key, math.ceil(2 * period_ms))
end

--- @include "notify"
-- group_left: one of group g's tasks left running. A group parked at its concurrency cap
-- (score +inf) is due again at once, and a worker is woken to claim it.
local function group_left(g)
  if redis.call('HINCRBY', K_GROUP_RUNNING, g, -1) <= 0 then
    redis.call('HDEL', K_GROUP_RUNNING, g)
  end
  if redis.call('ZSCORE', K_GROUPS_PARKED, g) == 'inf' then
    redis.call('ZADD', K_GROUPS_PARKED, 0, g)
    notify(1)
  end
end

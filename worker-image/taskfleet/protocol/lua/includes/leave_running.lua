--- @include "group_left"
-- Leave running: drop the lease, keep pod/incarnation as "last ran on". keep_token: the
-- token stays on the task (an outcome written under it), so a retry of that same write
-- (its reply was lost) is told apart from a stale one; it never authorises anything
-- again, since every write checks state 'running' too.
local function leave_running(id, key, pod, keep_token)
  redis.call('ZREM', K_RUNNING, id)
  if pod then redis.call('SREM', K_POD .. pod, id) end
  local g = redis.call('HGET', key, 'group')
  if g and g ~= '' then group_left(g) end
  if keep_token then
    redis.call('HDEL', key, 'lease_until')
  else
    redis.call('HDEL', key, 'token', 'lease_until')
  end
end

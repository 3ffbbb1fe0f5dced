-- deregister: a worker exits. Whatever this incarnation still holds is released (given
-- back gracefully, not an attempt), and its worker record is removed.
-- KEYS[1..18]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_PENDING,
--   K_RUNNING, K_POD, K_WORKERS, K_SEQ, K_STATS, K_NOTIFY, K_IDLE, K_WAKE.
-- ARGV[1] pod, ARGV[2] incarnation
-- Returns: how many tasks were released
local pod, incarnation = ARGV[1], ARGV[2]
local released = 0
-- another incarnation registered under the name since: the wake list and the record are
-- that one's now
local taken_by = other_holder(pod, incarnation)
-- no more hand-offs; what was handed over and not yet popped is released below
redis.call('ZREM', K_IDLE, pod .. '\0' .. incarnation)
if not taken_by then redis.call('DEL', K_WAKE .. pod) end
for _, id in ipairs(redis.call('SMEMBERS', K_POD .. pod)) do
  local key = K_TASK .. id
  local v = redis.call('HMGET', key, 'state', 'pod', 'incarnation')
  if v[1] == 'running' and v[2] == pod and v[3] == incarnation then
    release_task(id, key, pod)
    released = released + 1
  end
end
if not taken_by then redis.call('HDEL', K_WORKERS, pod) end
notify(released)
flush_counts()
return released

-- deregister: a worker exits. Whatever this incarnation still holds is released (given
-- back gracefully, not an attempt), and its worker record is removed. A worker that
-- exits because it failed (a bug, a task it could not start) gives its tasks back as
-- lost instead: a task that crashes every worker that claims it then goes dead after
-- max_lost crashes rather than crash the fleet for ever.
-- Arguments: ARG_* (signatures.Deregister).
-- Returns: how many tasks were given back
--- @include "now_ms"
--- @include "flush_counts"
--- @include "notify"
--- @include "take_back"
--- @include "release_task"
--- @include "other_holder"
local pod, incarnation = ARG_POD, ARG_INCARNATION
local failed = ARG_FAILED == '1'
local now = failed and now_ms() or 0
local released = 0
-- no more hand-offs; what was handed over and not yet popped is released below
redis.call('ZREM', K_IDLE, pod .. '\0' .. incarnation)
-- the tasks first: they go back even if the worker record can't be read (a clobbered key)
for _, id in ipairs(redis.call('SMEMBERS', K_POD .. pod)) do
  local key = K_TASK .. id
  local v = redis.call('HMGET', key, 'state', 'pod', 'incarnation')
  if v[1] == 'running' and v[2] == pod and v[3] == incarnation then
    if failed then
      take_back(id, key, pod, now)
    else
      release_task(id, key, pod)
    end
    released = released + 1
  end
end
-- another incarnation registered under the name since: the wake list and the record are
-- that one's now
if not other_holder(pod, incarnation) then
  redis.call('DEL', K_WAKE .. pod)
  redis.call('HDEL', K_WORKERS, pod)
end
notify(released)
flush_counts()
return released

-- pq_defer: a task claimed on a Redis Cluster whose provider quota, on its own slot,
-- could not reserve its estimate (pq_run 'reserve' answered a wait): the run is undone
-- as a claim that met the quota on a single server would have left it. It is not an
-- attempt: the task goes delayed until now + wait_ms, field `quota_wait` naming the quota;
-- a task never started before has its deadline back (it may expire while it waits).
-- Arguments: ARG_* (signatures.PqDefer).
-- Returns: 1 deferred; 0 refused (the token no longer holds the task: nothing changed).
--- @include "now_ms"
--- @include "holds"
--- @include "leave_running"
local key = K_TASK .. ARG_TASK_ID
local ok, pod = holds(key, ARG_TOKEN)
if not ok then return 0 end
local now = now_ms()
local run_at = now + math.max(0, tonumber(ARG_WAIT_MS) or 0)
leave_running(ARG_TASK_ID, key, pod)
local attempts = redis.call('HINCRBY', key, 'attempts', -1)
if attempts <= 0 then
  -- never started after all: its deadline (the claim dropped it) holds again
  redis.call('HDEL', key, 'started_at')
  local deadline = tonumber(redis.call('HGET', key, 'deadline'))
  if deadline then redis.call('ZADD', K_DEADLINES, deadline, ARG_TASK_ID) end
end
-- the field shares its name with a helper the bundle would look for: spelt in two parts
redis.call('HSET', key, 'state', 'delayed', 'run_at', run_at, 'quota' .. '_wait', ARG_NAME)
redis.call('ZADD', K_DELAYED, run_at, ARG_TASK_ID)
return 1

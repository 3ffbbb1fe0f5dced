-- watch: a producer's wait on tasks, registered atomically with a look at their states.
-- Arguments: ARG_* and RECORD(i) (signatures.Watch, one TaskId per task): the waiter id
--   (unique per wait call), then the task ids. K_WAITER is where the scripts that finish
--   a task push its id (wake_waiters).
-- Returns: a string with one character per task id, in order: 'F' finished (done or
--   dead) already; 'W' watched: when it finishes, its id is pushed onto K_WAITER .. waiter;
--   'A' absent (no such task: not enqueued yet, or pruned), nothing registered.
-- A task keeps the newest MAX_WAITERS waiter ids; an evicted one (or a waiter whose list
-- expired) sees the task finished when it looks again (Queue.wait looks every second).
local FINISHED_STATES = {done = true, dead = true, cancelled = true}
local MAX_WAITERS = 32
local waiter = ARG_WAITER
local out = {}
for i = 1, tonumber(ARG_N) do
  local key = K_TASK .. RECORD(i)
  local v = redis.call('HMGET', key, 'state', 'waiters')
  if not v[1] then
    out[#out + 1] = 'A'
  elseif FINISHED_STATES[v[1]] then
    out[#out + 1] = 'F'
  else
    local list, known = {}, false
    for w in string.gmatch(v[2] or '', '[^ ]+') do
      if w == waiter then known = true end
      list[#list + 1] = w
    end
    if not known then
      list[#list + 1] = waiter
      while #list > MAX_WAITERS do table.remove(list, 1) end
      redis.call('HSET', key, 'waiters', table.concat(list, ' '))
    end
    out[#out + 1] = 'W'
  end
end
return table.concat(out)

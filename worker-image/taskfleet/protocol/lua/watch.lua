-- watch: a producer's wait on tasks, registered atomically with a look at their states.
-- KEYS[1..]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK (K_WAITER is where
--   the scripts that finish a task push its id: wake_waiters in lib/core.lua).
-- ARGV[1]: the waiter id (unique per wait call); ARGV[2..]: task ids.
-- Returns: a string with one character per task id, in order: 'F' finished (done or
--   dead) already; 'W' watched: when it finishes, its id is pushed onto K_WAITER .. waiter;
--   'A' absent (no such task: not enqueued yet, or pruned), nothing registered.
-- A task keeps the newest MAX_WAITERS waiter ids; an evicted one (or a waiter whose list
-- expired) sees the task finished when it looks again (Queue.wait looks every second).
local FINISHED_STATES = {done = true, dead = true, cancelled = true}
local MAX_WAITERS = 32
local waiter = ARGV[1]
local out = {}
for i = 2, #ARGV do
  local key = K_TASK .. ARGV[i]
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

-- The link back from a task to one that waits for it (`dependant`: a task naming it in
-- 'after', or a parent that added it as a child): field 'by:<dependant>' = 1 of its
-- hash. Never removed while the task is kept (it goes with the hash at retention); a
-- flow's cancel and retry follow it to find the tasks downstream of a finished one
-- (protocol/flowwalk.py). Idempotent.
local function flow_link(key, dependant)
  redis.call('HSET', key, 'by:' .. dependant, 1)
end

--- @include "create_task"
--- @include-lazy "pending_add"
-- enqueue_task: create one task unless its id exists (schedule_fire.lua: a slot's task, of
-- the schedule's group if it has one).
-- Returns 1 if created, 0 if a task with this id exists (nothing changed), and whether
-- it went straight to pending.
local function enqueue_task(now, id, payload, priority, delay_ms, deadline, max_attempts, cost,
                            timeout, group)
  local key = K_TASK .. id
  if redis.call('EXISTS', key) == 1 then return 0, false end
  local ready, score = create_task(now, key, id, payload, priority, delay_ms, deadline,
    max_attempts, cost, timeout, nil, group)
  if score then pending_add(id, score, group) end
  return 1, ready
end


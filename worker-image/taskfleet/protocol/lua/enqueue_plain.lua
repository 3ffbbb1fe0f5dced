-- enqueue_plain: create plain tasks (no flow, group or parent) as enqueue does, given fewer keys.
-- A plain task has no after, on_dep_fail or group, and the call no parent or flow: nothing
-- of flows, groups, budgets or worker levels. Arguments: ARG_* and RECORD(i)
-- (signatures.EnqueuePlain, one PlainTask per task). What it stores and answers is what
-- enqueue stores and answers for the same tasks with the same token base and trace.
-- An idle worker is handed tasks by enqueue only (hand_off claims, and a claim needs the
-- claim's keys): with hand_off 1, a live idle registration (scored past now) and at least
-- one new task due now, nothing is stored and the reply is {0}; the caller sends the same
-- tasks to enqueue. Expired registrations, delayed or existing tasks are stored here.
-- Returns: {1, created_1, ..., created_N} (1 = new, 0 = the same task existed, unchanged)
--   or {-1, index, size, max} when payload #index exceeds max_payload_bytes,
--   or {-2, index, field} when task #index names an existing task that differs in field,
--   or {-3, index} when task #index repeats an id of an earlier task of the call,
--   or {0} (above); in those four cases nothing is stored.
--- @include "now_ms"
--- @include "cfg_num"
--- @include "flush_stats"
--- @include "notify"
--- @include "demand"
--- @include "create_task"
--- @include-lazy "task_differs"
local n = tonumber(ARG_N)
local max_bytes = cfg_num('max_payload_bytes')
local exists = {}
local seen = {}
for i = 1, n do
  local id, payload, priority, _, _, max_attempts, cost, timeout = RECORD(i)
  local size = string.len(payload)
  if size > max_bytes then return {-1, i, size, max_bytes} end
  if seen[id] then return {-3, i} end
  local key = K_TASK .. id
  if redis.call('EXISTS', key) == 1 then
    local field = task_differs(key, payload, priority, max_attempts, cost, timeout, '', '')
    if not field and (redis.call('HGET', key, 'group') or '') ~= '' then field = 'group' end
    if field then return {-2, i, field} end
    exists[i] = true
  end
  seen[id] = true
end
local now = now_ms()
if ARG_HAND_OFF == '1' and redis.call('EXISTS', K_IDLE) == 1 then
  for i = 1, n do
    if not exists[i] then
      local _, _, _, delay_ms = RECORD(i)
      if (tonumber(delay_ms) or 0) <= 0 then
        if redis.call('ZCOUNT', K_IDLE, '(' .. now, '+inf') > 0 then return {0} end
        break
      end
    end
  end
end
local out = {1}
local created, woken = 0, 0
for i = 1, n do
  if exists[i] then
    out[i + 1] = 0
  else
    local id, payload, priority, delay_ms, deadline, max_attempts, cost, timeout = RECORD(i)
    if create_task(now, K_TASK .. id, id, payload, priority, delay_ms, deadline, max_attempts,
        cost, timeout, ARG_TRACE, '') then
      woken = woken + 1
    end
    created = created + 1
    out[i + 1] = 1
  end
end
notify(woken)
-- Delayed, new tasks are still work the queue's watchers must see.
if created > 0 and woken <= 0 then demand() end
flush_stats()
return out

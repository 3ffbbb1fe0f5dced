-- cancel: tasks that must not run (or run on). A pending or delayed task ends cancelled
-- at once and never runs. A running one is marked (field 'cancel_requested' = now): its
-- worker learns it from its next heartbeat (extend's reply) and cancels the run; wherever
-- the task then leaves running (completed, failed, timed out, released, taken back) it ends
-- cancelled, never to run again.
-- Arguments: ARG_N and RECORD(i) (signatures.Cancel, one TaskId per task).
-- Returns: per id, 'cancelled' (it will never run), 'requested' (running: it ends
--   cancelled when its run returns), 'done' | 'dead' | 'finished' (it had finished:
--   nothing changed; 'finished' = cancelled before), or 'missing' (no such task).
--- @include "now_ms"
--- @include "flush_counts"
--- @include "to_cancelled"
--- @include "pending_remove"
local now = now_ms()
local out = {}
for i = 1, tonumber(ARG_N) do
  local id = RECORD(i)
  local key = K_TASK .. id
  local v = redis.call('HMGET', key, 'state', 'group')
  local state = v[1]
  if not state then
    out[i] = 'missing'
  elseif state == 'pending' or state == 'delayed' then
    pending_remove(id, v[2])
    redis.call('ZREM', K_DELAYED, id)
    to_cancelled(id, key, now)
    out[i] = 'cancelled'
  elseif state == 'running' then
    redis.call('HSETNX', key, 'cancel_requested', now)
    out[i] = 'requested'
  elseif state == 'cancelled' then
    out[i] = 'finished'
  else
    out[i] = state
  end
end
flush_counts()
return out

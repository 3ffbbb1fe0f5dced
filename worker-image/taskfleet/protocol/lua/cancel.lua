-- cancel: tasks that must not run (or run on). A pending or delayed task ends cancelled
-- at once and never runs. A running one is marked (field 'cancel_requested' = now): its
-- worker learns it from its next heartbeat (extend's reply) and cancels the run; wherever
-- the task then leaves running (completed, failed, timed out, released, taken back) it ends
-- cancelled, never to run again.
-- Arguments: ARG_N and RECORD(i) (signatures.Cancel, one TaskId per task).
-- A task waiting on others (state waiting) is cancelled like a pending one.
-- Returns: per id, 'cancelled' (it will never run), 'requested' (running: it ends
--   cancelled when its run returns), 'done' | 'dead' | 'finished' (it had finished:
--   nothing changed; 'finished' = cancelled before), or 'missing' (no such task).
--- @include "now_ms"
--- @include "flush_counts"
--- @include "cancel_task"
local now = now_ms()
local out = {}
for i = 1, tonumber(ARG_N) do
  local id = RECORD(i)
  out[i] = cancel_task(id, K_TASK .. id, now)
end
flush_counts()
return out

-- claim: hand up to n tasks to a worker, after the housekeeping that lets the fleet run
-- without the operator (promote due, expire deadlines, take back expired leases).
-- The work is claim_tasks (includes/claim_tasks.lua), which complete.lua shares.
-- Arguments: ARG_* (signatures.Claim). idle_ms > 0: if the queue runs dry, the worker is
--   registered as idle (waiting on its wake list) that long, so producers hand it tasks
--   directly; prefetch: how many of max_tasks are to wait in the worker for a slot, not
--   claimed under a fleet-wide concurrency limit (see claim_tasks). Tokens: token base
--   .. ':' .. i (the base is random, from the caller: Lua has no good randomness).
-- Returns: {retry_after_ms, next_due_ms, more, task 1, task 2, ...}, or {-1, record} when
--   another incarnation registered under the name since (the record is that one's): this
--   process was replaced (a frozen one resumed, say) and gets nothing; it must stop; or,
--   with registered '1', {-1, ''} when the name has no readable record: nothing claimed,
--   the caller registers again (register judges and takes over atomically) first
--   retry_after_ms: >0: claim again after that many ms: a rate limit held tasks back (ms
--     until capacity returns), or 1 while tasks whose deadline passed are left to clear
--     (more than a call expires)
--   next_due_ms: ms until the earliest delayed task is due, -1 if none
--   more: 1 if tasks are still pending after this claim, else 0 (an idle worker that got
--     fewer than n then waits for a wake-up instead of asking again)
--   (tasks handed to this worker by producers while it was not waiting come first)
--   task: one string per task (parsing replies is most of a worker's per-task cost), in
--     the tagged form (protocol/claimrecord.py, claim record 3): the element '\1' .. '3',
--     then name, value pairs, then an empty name and the payload (last, so it may hold
--     anything), all joined by NUL. Names: id, token, attempts, max_attempts (always);
--     lost, priority, cost (unless 0, 0, 1); timeout (s), waited_ms (from run_at, when it
--     was enqueued, fell due or was retried, to now), deadline (ms), group, trace, after
--     (the JSON list of the tasks it waited for: its dependency results' handle),
--     checkpoint (the state an earlier attempt stored, checkpoint.lua), each only when set; no value is empty. Readers ignore names they do not know. A
--     hand-off a producer pushes (hand_off.lua) takes that form only for a worker whose
--     record says claim_record 3; else the positional one every version reads: id,
--     token, attempts, max_attempts, timeout_s ('' = none), lost, priority, cost,
--     payload. A named task's payload is stored as '\1' .. name .. '\1' .. JSON
--     (taskfleet/protocol/tasknames.py) and goes as is
--- @include "now_ms"
--- @include "flush_counts"
--- @include "claim_tasks"
local out = claim_tasks(now_ms(), ARG_POD, ARG_INCARNATION, tonumber(ARG_MAX_TASKS),
  ARG_TOKEN_BASE, tonumber(ARG_BOUND), tonumber(ARG_IDLE_MS), tonumber(ARG_PREFETCH), nil,
  ARG_REGISTERED == '1', ARG_QUOTA_SLOTS == '1')
flush_counts()
return out

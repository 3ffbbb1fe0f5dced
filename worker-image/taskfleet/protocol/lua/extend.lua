-- extend: the heartbeat. Extends every lease the caller still holds and refreshes the
-- worker's record, in one call per heartbeat whatever the number of tasks.
-- Arguments: ARG_* and RECORD(i) (signatures.Extend, one Held per task the worker holds:
--   task id, claim token). draining '1' | '0'; host: the worker's whereabouts (opaque);
--   held: its held slots (calls given up on that still run; recorded when > 0).
-- Returns: {'', ids whose token no longer matches (taken back: the worker must abandon
--   them)...}, followed, when some held task's cancellation was asked for, by '' and the
--   ids of those (the worker cancels their runs; '' is no task id, so an older worker
--   reads them as lost and drops them, and their leases end them cancelled); or {-1, the
--   pod's record} when another incarnation registered under the pod's name since (it took
--   back what this one held): nothing is extended or written, and the caller must stop;
--   or, with registered '1', {-1, ''} when the name has no readable record (nothing
--   extended or written: a heartbeat never recreates a record; the caller registers
--   again, then beats).
-- A draining worker gets no more hand-offs, and those it has not popped go back to the
-- front of pending at once (released, not an attempt) rather than wait for its exit.
--- @include "now_ms"
--- @include "cfg_num"
--- @include "handed_task"
--- @include "flush_counts"
--- @include "notify"
--- @include "release_task"
--- @include "worker_record"
--- @include "superseded"
local pod, incarnation = ARG_POD, ARG_INCARNATION
local taken_by = superseded(pod, incarnation, ARG_REGISTERED == '1')
if taken_by then return {-1, taken_by} end
local now = now_ms()
local lease_until = now + math.floor(cfg_num('lease_ttl_s') * 1000)
local lost = {''}
local cancel = nil
for i = 1, tonumber(ARG_N) do
  local id, token = RECORD(i)
  local key = K_TASK .. id
  local v = redis.call('HMGET', key, 'state', 'token', 'cancel_requested')
  if v[1] == 'running' and v[2] == token then
    redis.call('ZADD', K_RUNNING, 'XX', lease_until, id)
    redis.call('HSET', key, 'lease_until', lease_until)
    if v[3] then
      cancel = cancel or {}
      cancel[#cancel + 1] = id
    end
  else
    lost[#lost + 1] = id
  end
end
local record = worker_record(incarnation, now, ARG_INFLIGHT, ARG_CONCURRENCY, ARG_DRAINING,
  ARG_HOST, ARG_HELD)
redis.call('HSET', K_WORKERS, pod, record)
if ARG_DRAINING == '1' then
  redis.call('ZREM', K_IDLE, pod .. '\0' .. incarnation)
  local wake = K_WAKE .. pod
  local released = 0
  for _, rec in ipairs(redis.call('LRANGE', wake, 0, -1)) do
    local id, key, held = handed_task(rec, incarnation)
    if held then
      if release_task(id, key, pod) then released = released + 1 end
    end
  end
  redis.call('DEL', wake)
  notify(released)
  flush_counts()
end
if cancel then
  lost[#lost + 1] = ''
  for _, id in ipairs(cancel) do lost[#lost + 1] = id end
end
return lost

-- register: a worker starts. Takes back what earlier incarnations of the same pod held
-- (a restarted container keeps its pod name) and records the worker.
-- Arguments: ARG_* (signatures.Register): host: the worker's whereabouts (opaque; '' =
--   none); expected: the incarnation whose record the caller judged gone ('' = it expects
--   no record; '*' = take over whatever is there).
-- Returns: {requeued to pending, gone dead}, or, when another incarnation than the one
--   expected holds the pod's record (the caller must judge it first; nothing is changed):
--   {-1, that record, server time in ms}, or, when the worker's pod is gone from the
--   Kubernetes API (requeue left a tombstone; nothing is changed; the worker must exit):
--   {-2, until when the tombstone holds (ms), server time in ms}
--- @include "now_ms"
--- @include "forget_idle"
--- @include "flush_counts"
--- @include "requeue_pod"
--- @include "worker_record"
--- @include "other_holder"
--- @include "tombstoned"
local pod, incarnation, expected = ARG_POD, ARG_INCARNATION, ARG_EXPECTED
local now = now_ms()
-- a force-deleted pod's container outlives its pod: registering again, it would claim
-- tasks the operator already took back from it and lose them a second time
local gone_until = tombstoned(pod, now)
if gone_until then return {-2, gone_until, now} end
if expected ~= '*' then
  local rec, holder = other_holder(pod, incarnation)
  if rec and holder ~= expected then return {-1, rec, now} end
end
-- an earlier incarnation that died waiting must get no more hand-offs: they would reach
-- no one (and what was handed to it already is taken back just below)
forget_idle(pod, incarnation)
local requeued, dead = requeue_pod(pod, incarnation, now)
redis.call('HSET', K_WORKERS, pod, worker_record(incarnation, now, 0, ARG_CONCURRENCY, '0',
  ARG_HOST))
flush_counts()
return {requeued, dead}

-- register: a worker starts. Takes back what earlier incarnations of the same pod held
-- (a restarted container keeps its pod name) and records the worker.
-- KEYS[1..19]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_PENDING,
--   K_RUNNING, K_DEAD, K_DEADLINES, K_POD, K_WORKERS, K_CONFIG, K_SEQ, K_STATS, K_NOTIFY, K_DEMAND,
--   K_IDLE, K_WAKE.
-- ARGV[1] pod, ARGV[2] incarnation, ARGV[3] concurrency, ARGV[4] the worker's whereabouts
--   (opaque; '' = none), ARGV[5] the incarnation whose record the caller judged gone ('' =
--   it expects no record; '*' = take over whatever is there)
-- Returns: {requeued to pending, gone dead}, or, when another incarnation than the one
--   expected holds the pod's record (the caller must judge it first; nothing is changed):
--   {-1, that record, server time in ms}
--- @include "now_ms"
--- @include "forget_idle"
--- @include "flush_counts"
--- @include "requeue_pod"
--- @include "worker_record"
--- @include "other_holder"
local pod, incarnation, expected = ARGV[1], ARGV[2], ARGV[5]
local now = now_ms()
if expected ~= '*' then
  local rec, holder = other_holder(pod, incarnation)
  if rec and holder ~= expected then return {-1, rec, now} end
end
-- an earlier incarnation that died waiting must get no more hand-offs: they would reach
-- no one (and what was handed to it already is taken back just below)
forget_idle(pod, incarnation)
local requeued, dead = requeue_pod(pod, incarnation, now)
redis.call('HSET', K_WORKERS, pod, worker_record(incarnation, now, 0, ARGV[3], '0', ARGV[4]))
flush_counts()
return {requeued, dead}

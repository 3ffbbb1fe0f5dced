-- requeue: take back every task a pod holds (the pod is gone, or restarted). Atomic and
-- idempotent: a second caller finds the pod's set empty and requeues nothing.
-- Arguments: ARG_* (signatures.Requeue): keep_incarnation '' = none: take back everything
--   and drop the worker record; otherwise only tasks of other incarnations, and the
--   record is kept if it belongs to the kept incarnation. tombstone_s (not ''): the pod is
--   gone from the Kubernetes API; for that many seconds none of its workers may register.
-- Returns: {requeued to pending, gone dead (worker lost more than max_lost times)}
--- @include "now_ms"
--- @include "forget_idle"
--- @include "flush_counts"
--- @include "requeue_pod"
--- @include "tombstone"
local pod, keep = ARG_POD, ARG_KEEP_INCARNATION
local now = now_ms()
if ARG_TOMBSTONE_S ~= '' then tombstone(pod, now, tonumber(ARG_TOMBSTONE_S) or 0) end
forget_idle(pod, keep)
local requeued, dead = requeue_pod(pod, keep, now)
local rec = redis.call('HGET', K_WORKERS, pod)
if rec then
  local ok, w = pcall(cjson.decode, rec)
  if keep == '' or not ok or type(w) ~= 'table' or w.incarnation ~= keep then
    redis.call('HDEL', K_WORKERS, pod)
  end
end
flush_counts()
return {requeued, dead}

--- @include "pod_of"
-- Tombstones: pods gone from the Kubernetes API whose workers may not register again
-- (K_TOMBSTONES: pod -> until when, ms). A worker name <pod>#<i> is its pod's process i,
-- so the pod's tombstone covers every process of it, registered yet or not.
-- Until when (ms) the name's pod is tombstoned, or nil.
local function tombstoned(name, now)
  local until_ms = tonumber(redis.call('ZSCORE', K_TOMBSTONES, pod_of(name)))
  if until_ms and until_ms > now then return until_ms end
  return nil
end

-- release: a draining worker gives back tasks it could not finish. They go to the front
-- of their priority (they already waited) and the start does not count as an attempt.
-- KEYS[1..19]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_PENDING,
--   K_RUNNING, K_POD, K_SEQ, K_STATS, K_NOTIFY, K_DEMAND.
-- ARGV[1] pod (the caller; the token alone decides), then pairs: task id, claim token
-- Returns: how many were released (stale tokens are skipped and counted; a task whose
--   cancellation was asked for ends cancelled and is not counted).
--- @include "bump"
--- @include "flush_counts"
--- @include "notify"
--- @include "holds"
--- @include "release_task"
local released = 0
for i = 2, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local key = K_TASK .. id
  local ok, pod = holds(key, token)
  if ok then
    if release_task(id, key, pod) then released = released + 1 end
  else
    bump('stale')
  end
end
notify(released)
flush_counts()
return released

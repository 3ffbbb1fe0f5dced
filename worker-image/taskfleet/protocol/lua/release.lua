-- release: a draining worker gives back tasks it could not finish. They go to the front
-- of their priority (they already waited) and the start does not count as an attempt.
-- Arguments: ARG_* and RECORD(i) (signatures.Release, one Held per task): the caller's pod
--   (the token alone decides), whether no handler began these runs ('1': they leave no
--   history record), then task id and claim token per task.
-- Returns: how many were released (stale tokens are skipped and counted; a task whose
--   cancellation was asked for ends cancelled and is not counted).
--- @include "bump"
--- @include "flush_counts"
--- @include "notify"
--- @include "holds"
--- @include "release_task"
local released = 0
for i = 1, tonumber(ARG_N) do
  local id, token = RECORD(i)
  local key = K_TASK .. id
  local ok, pod = holds(key, token)
  if ok then
    if release_task(id, key, pod, ARG_UNSTARTED == '1') then released = released + 1 end
  else
    bump('stale')
  end
end
notify(released)
flush_counts()
return released

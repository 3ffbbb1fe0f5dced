-- disown: undo claims whose reply never reached the worker. A claim the worker gave up
-- waiting for (no reply in time, connection lost) may still run on Redis later; the
-- tasks it took are held under tokens the worker never saw, so nothing would run them
-- until their lease expired, and that would count a loss and an attempt for a task
-- that never started. The worker names the token bases of such calls; their tasks go
-- back to the front of pending as a graceful release does (not an attempt, not lost).
-- Arguments: ARG_* and RECORD(i) (signatures.Disown, one TokenBase per unanswered claim
--   call).
-- Returns: how many tasks were released
--- @include "flush_counts"
--- @include "notify"
--- @include "release_task"
local pod, incarnation = ARG_POD, ARG_INCARNATION
local bases = {}
for i = 1, tonumber(ARG_N) do bases[RECORD(i) .. ':'] = true end
local released = 0
for _, id in ipairs(redis.call('SMEMBERS', K_POD .. pod)) do
  local key = K_TASK .. id
  local v = redis.call('HMGET', key, 'state', 'token', 'incarnation')
  if v[1] == 'running' and v[3] == incarnation and v[2] then
    local cut = string.find(v[2], ':', 1, true)
    if cut and bases[string.sub(v[2], 1, cut)] then
      if release_task(id, key, pod) then released = released + 1 end
    end
  end
end
notify(released)
flush_counts()
return released

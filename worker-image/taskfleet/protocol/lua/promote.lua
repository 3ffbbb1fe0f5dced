-- promote: delayed tasks run now, before their run_at (a task scheduled for later, or
-- waiting out a retry's backoff). Each goes to pending at its priority, behind what waits
-- there, its run_at set to now; one not delayed is left as it is.
-- Arguments: ARG_N and RECORD(i) (signatures.Promote, one TaskId per task).
-- Returns: a string of one character per id: 1 promoted, 0 not delayed (left as it was)
--- @include "now_ms"
--- @include "notify"
--- @include "to_pending"
local now = now_ms()
local out = {}
local n = 0
for i = 1, tonumber(ARG_N) do
  local id = RECORD(i)
  local key = K_TASK .. id
  -- the zset, not the field: a delayed entry left behind by a purge is no task to run
  if redis.call('ZREM', K_DELAYED, id) == 1 and redis.call('EXISTS', key) == 1 then
    redis.call('HSET', key, 'run_at', now)
    to_pending(id, key, false)
    n = n + 1
    out[i] = '1'
  else
    out[i] = '0'
  end
end
notify(n)
return table.concat(out)

--- @include "to_dead"
--- @include "cancel_task"
--- @include "pending_remove"
-- A task that waits on others, whose dependency `dep` ended `how` (dead, cancelled or
-- missing), ends by its policy `on_dep_fail`: 'cancel' cancels it (a running one is asked
-- to stop) and every dependency of it still unfinished (its field 'after'); anything
-- else ('fail', the default) makes it dead with reason 'dependency failed'. ('ignore'
-- never gets here.)
local function flow_end(id, key, now, policy, dep, how)
  local why = 'dependency ' .. dep .. ' ended ' .. how
  if policy ~= 'cancel' then
    redis.call('ZREM', K_WAITING, id)
    pending_remove(id, redis.call('HGET', key, 'group'))
    to_dead(id, key, now, 'dependency failed', why)
    return
  end
  cancel_task(id, key, now)
  redis.call('HSET', key, 'error', why)
  local ok, deps = pcall(cjson.decode, redis.call('HGET', key, 'after') or '[]')
  if not ok or type(deps) ~= 'table' then return end
  for _, other in ipairs(deps) do
    if other ~= dep then cancel_task(other, K_TASK .. other, now) end
  end
end

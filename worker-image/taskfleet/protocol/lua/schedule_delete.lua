-- schedule_delete: remove one schedule from the store. Tasks it fired stay.
-- Arguments: ARG_* (signatures.ScheduleDelete): owner of the caller ('' = the API,
--   'taskqueue' = the operator); take_over '1' when the caller may remove a schedule of
--   the other owner.
-- Returns: {1} deleted, {0} no such schedule, {-2, owner} it belongs to another owner.
local name = ARG_NAME
local key = K_SCHEDULE .. name
if redis.call('EXISTS', key) == 0 then
  redis.call('SREM', K_SCHEDULES, name)
  redis.call('SREM', K_SCHEDULES_OWNED, name)
  redis.call('ZREM', K_SCHEDULE_DUE, name)
  return {0}
end
local owner = redis.call('HGET', key, 'owner') or ''
if owner ~= ARG_OWNER and ARG_TAKE_OVER ~= '1' then return {-2, owner} end
redis.call('DEL', key)
redis.call('SREM', K_SCHEDULES, name)
redis.call('SREM', K_SCHEDULES_OWNED, name)
redis.call('ZREM', K_SCHEDULE_DUE, name)
return {1}

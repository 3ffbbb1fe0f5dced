-- schedule_delete: remove one schedule from the store. Tasks it fired stay.
-- KEYS[1..]: the queue's key set (keys.SCRIPT_KEYS), used here: K_SCHEDULE, K_SCHEDULES,
--   K_SCHEDULE_DUE, K_SCHEDULES_OWNED.
-- ARGV[1] name, ARGV[2] owner of the caller ('' = the API, 'taskqueue' = the operator),
--   ARGV[3] '1' when the caller may remove a schedule of the other owner.
-- Returns: {1} deleted, {0} no such schedule, {-2, owner} it belongs to another owner.
local key = K_SCHEDULE .. ARGV[1]
if redis.call('EXISTS', key) == 0 then
  redis.call('SREM', K_SCHEDULES, ARGV[1])
  redis.call('SREM', K_SCHEDULES_OWNED, ARGV[1])
  redis.call('ZREM', K_SCHEDULE_DUE, ARGV[1])
  return {0}
end
local owner = redis.call('HGET', key, 'owner') or ''
if owner ~= ARGV[2] and ARGV[3] ~= '1' then return {-2, owner} end
redis.call('DEL', key)
redis.call('SREM', K_SCHEDULES, ARGV[1])
redis.call('SREM', K_SCHEDULES_OWNED, ARGV[1])
redis.call('ZREM', K_SCHEDULE_DUE, ARGV[1])
return {1}

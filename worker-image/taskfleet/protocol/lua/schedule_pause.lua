-- schedule_pause: pause or resume one schedule. A paused schedule is out of the due set;
-- slots that pass while it is paused are not fired. Resuming starts from the first slot
-- after now (computed by the caller).
-- KEYS[1..]: the queue's key set (keys.SCRIPT_KEYS), used here: K_SCHEDULE, K_SCHEDULE_DUE.
-- ARGV[1] name, ARGV[2] '1' pause | '0' resume, ARGV[3] owner of the caller,
--   ARGV[4] next slot (epoch s, '' = none) and ARGV[5] its due time (ms), for a resume.
-- Returns: {1} changed, {0} it already was, {-1} no such schedule, {-2, owner} it belongs
--   to another owner.
--- @include "now_ms"
local name = ARGV[1]
local key = K_SCHEDULE .. name
if redis.call('EXISTS', key) == 0 then return {-1} end
local owner = redis.call('HGET', key, 'owner') or ''
if owner ~= ARGV[3] then return {-2, owner} end
if (redis.call('HGET', key, 'paused') or '0') == ARGV[2] then return {0} end
redis.call('HSET', key, 'paused', ARGV[2], 'updated_ms', now_ms())
redis.call('HINCRBY', key, 'rev', 1)
if ARGV[2] == '1' then
  redis.call('ZREM', K_SCHEDULE_DUE, name)
else
  redis.call('HSET', key, 'next_slot', ARGV[4])
  if ARGV[4] ~= '' then redis.call('ZADD', K_SCHEDULE_DUE, ARGV[5], name) end
end
return {1}

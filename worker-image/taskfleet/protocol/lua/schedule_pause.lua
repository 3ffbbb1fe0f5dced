-- schedule_pause: pause or resume one schedule. A paused schedule is out of the due set;
-- slots that pass while it is paused are not fired. Resuming starts from the first slot
-- after now (computed by the caller).
-- Arguments: ARG_* (signatures.SchedulePause): paused '1' pause | '0' resume; owner of the
--   caller; next slot (epoch s, '' = none) and its due time (ms), for a resume.
-- Returns: {1} changed, {0} it already was, {-1} no such schedule, {-2, owner} it belongs
--   to another owner.
--- @include "now_ms"
local name = ARG_NAME
local key = K_SCHEDULE .. name
if redis.call('EXISTS', key) == 0 then return {-1} end
local owner = redis.call('HGET', key, 'owner') or ''
if owner ~= ARG_OWNER then return {-2, owner} end
if (redis.call('HGET', key, 'paused') or '0') == ARG_PAUSED then return {0} end
redis.call('HSET', key, 'paused', ARG_PAUSED, 'updated_ms', now_ms())
redis.call('HINCRBY', key, 'rev', 1)
if ARG_PAUSED == '1' then
  redis.call('ZREM', K_SCHEDULE_DUE, name)
else
  redis.call('HSET', key, 'next_slot', ARG_NEXT_SLOT)
  if ARG_NEXT_SLOT ~= '' then redis.call('ZADD', K_SCHEDULE_DUE, ARG_NEXT_DUE_MS, name) end
end
return {1}

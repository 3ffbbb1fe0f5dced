-- schedule_put: create or change one schedule of the store (protocol/schedules.py).
-- Arguments: ARG_* and RECORD(i) (signatures.SchedulePut, one ScheduleField per definition
--   field: cron tz payload priority max_attempts cost timeout deadline_ms catchup
--   catchup_limit jitter_ms). owner '' = the API, 'taskqueue' = a TaskQueue's spec;
--   take_over '1' when the caller may take over a schedule of the other owner; first
--   slot (epoch s, '' = none within the search horizon), its due time (ms); paused '0' |
--   '1'.
-- A definition equal to the stored one changes nothing. One whose timing (cron, tz,
-- jitter) changed starts again from the first slot given; otherwise the slot to fire
-- next is kept, so an edit of the payload neither fires nor skips a slot.
-- A definition with a group is refused while a live worker older than groups serves the
-- queue (older_worker): it would fire the schedule's slots without the group.
-- Returns: {1} created, {2} changed, {0} unchanged, {-1, size, max} payload over the
--   queue's max_payload_bytes, {-2, owner} the schedule belongs to another owner,
--   {-6, pod, 'groups'} refused for pod, a live older worker (nothing changed).
--- @include "now_ms"
--- @include "cfg_num"
--- @include-lazy "older_worker"
local name, owner = ARG_NAME, ARG_OWNER
local key = K_SCHEDULE .. name
local n = tonumber(ARG_N)
local def = {}
local payload = ''
local grouped = false
for i = 1, n do
  local f, v = RECORD(i)
  def[#def + 1] = f
  def[#def + 1] = v
  if f == 'payload' then payload = v end
  if f == 'group' and v ~= '' then grouped = true end
end
local max_bytes = cfg_num('max_payload_bytes')
if string.len(payload) > max_bytes then return {-1, string.len(payload), max_bytes} end
local now = now_ms()
if grouped then
  local pod = older_worker(now)
  if pod then return {-6, pod, 'groups'} end
end
local function own()
  if owner == 'taskqueue' then
    redis.call('SADD', K_SCHEDULES_OWNED, name)
  else
    redis.call('SREM', K_SCHEDULES_OWNED, name)
  end
end
local exists = redis.call('EXISTS', key) == 1
if exists then
  local stored_owner = redis.call('HGET', key, 'owner') or ''
  if stored_owner ~= owner and ARG_TAKE_OVER ~= '1' then return {-2, stored_owner} end
  own()
  local same = stored_owner == owner
  local timing = false
  for i = 1, #def, 2 do
    local old = redis.call('HGET', key, def[i])
    if old ~= def[i + 1] then
      same = false
      if def[i] == 'cron' or def[i] == 'tz' or def[i] == 'jitter_ms' then timing = true end
    end
  end
  local paused = redis.call('HGET', key, 'paused') or '0'
  if same and paused == ARG_PAUSED then return {0} end
  redis.call('HSET', key, 'owner', owner, 'updated_ms', now, unpack(def))
  redis.call('HINCRBY', key, 'rev', 1)
  if timing or (paused == '1' and ARG_PAUSED == '0') then
    redis.call('HSET', key, 'next_slot', ARG_FIRST_SLOT)
  end
  redis.call('HSET', key, 'paused', ARG_PAUSED)
  if ARG_PAUSED == '1' or redis.call('HGET', key, 'next_slot') == '' then
    redis.call('ZREM', K_SCHEDULE_DUE, name)
  elseif timing or paused == '1' then
    redis.call('ZADD', K_SCHEDULE_DUE, ARG_FIRST_DUE_MS, name)
  end
  return {2}
end
local last = ''
if owner == 'taskqueue' then  -- the slot it last fired before the store, if any
  last = redis.call('GET', K_SCHED .. name) or ''
  redis.call('DEL', K_SCHED .. name)
end
redis.call('HSET', key, 'name', name, 'owner', owner, 'rev', 1, 'paused', ARG_PAUSED,
  'next_slot', ARG_FIRST_SLOT, 'last_slot', last, 'fired', 0, 'skipped', 0, 'error', '',
  'created_ms', now, 'updated_ms', now, unpack(def))
redis.call('SADD', K_SCHEDULES, name)
own()
if ARG_PAUSED ~= '1' and ARG_FIRST_SLOT ~= '' then redis.call('ZADD', K_SCHEDULE_DUE, ARG_FIRST_DUE_MS, name) end
return {1}

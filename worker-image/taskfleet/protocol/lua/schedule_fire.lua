-- schedule_fire: fire a batch of schedules' slots, each exactly once. For each schedule
-- the firer read (schedule_due) and computed (protocol/schedules.py), the script compares
-- the stored revision and next slot with what the firer read: equal, it enqueues one task
-- per slot to fire (id 'sched:<name>:<slot>') and moves the next slot and due time on, in
-- this one call; different (another firer was first, or the schedule changed), it does
-- nothing for that schedule. The next slot only moves forward, so no slot fires twice.
-- Arguments: ARG_N and RECORD(i) (signatures.ScheduleFire, one FirePlan per schedule):
--   name, rev, expected next slot, the slots to fire (a JSON array of epoch seconds,
--   ascending), how many missed slots the catch-up policy skips, new next slot ('' = none
--   within the search horizon), its due time (ms).
-- A payload over the queue's max_payload_bytes (the bound changed since the schedule was
-- stored) fires nothing: the slots count as skipped and the schedule's error says why.
-- Returns: {fired tasks, then per schedule: 1 applied | 0 stale (nothing changed)}.
--- @include "now_ms"
--- @include "cfg_num"
--- @include "flush_counts"
--- @include "notify"
--- @include "demand"
--- @include "enqueue_task"
local n = tonumber(ARG_N)
local now = now_ms()
local max_bytes = cfg_num('max_payload_bytes')
local out = {0}
local created_total, immediate = 0, 0
for i = 1, n do
  local name, rev, expected, slots_json, skipped, next_slot, next_due = RECORD(i)
  skipped = tonumber(skipped)
  local slots = {}
  for j, slot in ipairs(cjson.decode(slots_json)) do slots[j] = string.format('%d', slot) end
  local k = #slots
  local key = K_SCHEDULE .. name
  local v = redis.call('HMGET', key, 'rev', 'next_slot', 'paused', 'payload', 'priority',
    'max_attempts', 'cost', 'timeout', 'deadline_ms', 'group')
  if v[1] ~= rev or v[2] ~= expected or v[3] == '1' then
    out[#out + 1] = 0
  else
    local err = ''
    local created = 0
    if k > 0 and string.len(v[4]) > max_bytes then
      err = 'payload is ' .. string.len(v[4]) .. ' bytes; the queue allows ' .. max_bytes
      skipped = skipped + k
    else
      for _, slot in ipairs(slots) do
        local made, now_pending = enqueue_task(now, 'sched:' .. name .. ':' .. slot, v[4],
          v[5] or '0', 0, v[9] or '', v[6] or '', v[7] or '1', v[8] or '', v[10])
        created = created + made
        if now_pending then immediate = immediate + 1 end
      end
    end
    local fields = {'next_slot', next_slot, 'error', err}
    if k > 0 then
      fields[#fields + 1] = 'last_slot'
      fields[#fields + 1] = slots[k]
    end
    redis.call('HSET', key, unpack(fields))
    if created > 0 then redis.call('HINCRBY', key, 'fired', created) end
    if skipped > 0 then redis.call('HINCRBY', key, 'skipped', skipped) end
    if next_slot == '' then
      redis.call('ZREM', K_SCHEDULE_DUE, name)
    else
      redis.call('ZADD', K_SCHEDULE_DUE, next_due, name)
    end
    created_total = created_total + created
    out[#out + 1] = 1
  end
end
out[1] = created_total
notify(immediate)
if created_total > 0 and immediate == 0 then demand() end
flush_counts()
return out

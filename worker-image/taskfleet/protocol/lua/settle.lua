-- settle: a running handler tells what its provider call really used of a provider quota
-- (current_task().settle): the difference from what its run was charged so far (the
-- estimate its claim reserved, scaled: pq_scale; or its last settlement) is charged to the quota's current
-- window, or given back when the run was claimed in this window (a window already past
-- keeps what it was charged). Use above the limit is debt the next windows wait out.
-- When the queue's groups are fair by a unit this settles (K_GROUPS_FAIR), the task's
-- group's virtual time takes the difference too (group_charge), in any window.
-- Settled for that run (same token) in any state: it may land just after the outcome.
-- Arguments: ARG_* (signatures.Settle).
-- Returns: 1 settled; 0 refused (another run holds the task, or it is gone); -1 the task
--   names no such quota; -2 the quota does not exist; -3 the quota lies in another slot
--   (a Redis Cluster): nothing written, the run settles on the quota's slot (pq_run).
--- @include "now_ms"
--- @include "pq_load"
--- @include "pq_settled"
--- @include "pq_learn"
--- @include "group_charge"
local now = now_ms()
local key = K_TASK .. ARG_TASK_ID
local v = redis.call('HMGET', key, 'token', 'quotas', 'started_at', 'quota_settled', 'group',
  'quota_charged')
if v[1] ~= ARG_TOKEN then return 0 end
local ok, est = pcall(cjson.decode, v[2] or '')
if not ok or type(est) ~= 'table' or type(est[ARG_NAME]) ~= 'table' then return -1 end
local q = pq_load(ARG_NAME, now)
if not q then return -2 end
if q.remote then return -3 end
local settled = pq_settled(v[4], ARG_TOKEN) or {}
local charged = pq_settled(v[6], ARG_TOKEN) or {}
local before = settled[ARG_NAME] or charged[ARG_NAME] or est[ARG_NAME]
local same_window = (tonumber(v[3]) or 0) >= q.window
local used = cjson.decode(ARG_USED)
if settled[ARG_NAME] == nil then pq_learn(q, est[ARG_NAME], used) end
local by = redis.call('GET', K_GROUPS_FAIR)
-- the group was charged the raw estimate at claim (group_took), not the scaled one
local group_before = settled[ARG_NAME] or est[ARG_NAME]
if by and used[by] then
  group_charge(v[5] or '', used[by] - (tonumber(group_before[by]) or 0))
end
local fields = {}
for unit, amount in pairs(used) do
  local diff = amount - (tonumber(before[unit]) or 0)
  if diff < 0 and not same_window then diff = 0 end
  if diff ~= 0 then
    q.used[unit] = math.max(0, (q.used[unit] or 0) + diff)
    fields[#fields + 1] = 'used:' .. unit
    fields[#fields + 1] = q.used[unit]
  end
end
if #fields > 0 then redis.call('HSET', q.key, unpack(fields)) end
local merged = {}
for unit, amount in pairs(before) do merged[unit] = amount end
for unit, amount in pairs(used) do merged[unit] = amount end
settled[ARG_NAME] = merged
redis.call('HSET', key, 'quota_settled', cjson.encode({token = ARG_TOKEN, by = settled}))
return 1

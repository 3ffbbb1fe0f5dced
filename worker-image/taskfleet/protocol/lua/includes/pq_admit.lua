--- @include "pq_load"
--- @include "pq_live"
--- @include "pq_scaled"
-- pq_admit: reserve what a task's `quotas` (its JSON field: {name: {unit: amount}})
-- estimates (times each unit's learned scale: pq_scaled), all or nothing, for its run under `token` (task hash `key`). Each unit's
-- use in the window is charged at once; a settlement (settle.lua) corrects it later.
-- A unit fits while its use plus the estimate stays within its limit, or nothing of it
-- is used yet (an estimate above a whole limit runs alone in a window).
-- Returns 0 when reserved, else {ms to wait before looking again, the quota's name};
-- the wait is at most PQ_MAX_WAIT_MS, so a resume or a new limit is seen by then; or
-- {-1, a quota's name} when a quota lies in another slot (a Redis Cluster): nothing is
-- reserved here, the worker reserves on the quota's slot (pq_run.lua).
local PQ_MAX_WAIT_MS = 5000
local PQ_CONC_WAIT_MS = 500
local function pq_admit(quotas, key, token, now)
  local ok, want = pcall(cjson.decode, quotas)
  if not ok or type(want) ~= 'table' then return 0 end  -- unreadable: reserves nothing
  local found = {}
  local any_scaled = false
  for name, units in pairs(want) do
    local q = type(units) == 'table' and pq_load(name, now)
    if q and q.remote then return {-1, name} end
    if q then
      local scaled, differs = pq_scaled(q, units)
      if differs then any_scaled = true end
      units = scaled
      local wait = 0
      if q.till > now then wait = q.till - now end
      if wait == 0 then
        for unit, amount in pairs(units) do
          local limit, used = q.limits[unit], q.used[unit] or 0
          local need = tonumber(amount) or 0
          if limit and limit > 0 and need > 0 and used > 0 and used + need > limit then
            wait = q.window_end - now
            break
          end
        end
      end
      if wait == 0 and q.conc > 0
          and redis.call('ZCARD', K_PQUOTA_HOLDS .. name) + q.nruns >= q.conc
          and pq_live(q, now) >= q.conc then
        wait = PQ_CONC_WAIT_MS
      end
      if wait > 0 then return {math.min(wait, PQ_MAX_WAIT_MS), name} end
      found[#found + 1] = {q, units}
    end
  end
  local charged = {}
  for _, pair in ipairs(found) do
    local q, units = pair[1], pair[2]
    charged[q.name] = units
    local fields = {}
    for unit, amount in pairs(units) do
      local need = tonumber(amount) or 0
      if need > 0 then
        q.used[unit] = (q.used[unit] or 0) + need
        fields[#fields + 1] = 'used:' .. unit
        fields[#fields + 1] = q.used[unit]
      end
    end
    if #fields > 0 then redis.call('HSET', q.key, unpack(fields)) end
    if q.conc > 0 then redis.call('ZADD', K_PQUOTA_HOLDS .. q.name, now, key .. '\0' .. token) end
  end
  -- what was charged, when a learned scale made it differ from the estimate: the run's
  -- settlement and refund count from it (read back by pq_settled, as quota_settled is)
  if any_scaled then
    redis.call('HSET', key, 'quota_charged', cjson.encode({token = token, by = charged}))
  end
  return 0
end

--- @include "pq_load"
--- @include "pq_settled"
-- pq_refund: a run given back before its end (release_task: a drain, a claim whose reply
-- never came, a hand-off never popped) is not an attempt, so what its claim reserved of
-- each provider quota goes back: unless the run settled (its use was real) or the window
-- it was claimed in has passed (that window keeps its charge, as a settlement does).
-- Reads the task's fields before the run leaves them (token, started_at). A quota in
-- another slot (a cluster) is refunded by the worker on the quota's slot (pq_run 'end').
local function pq_refund(key, now)
  local v = redis.call('HMGET', key, 'quotas', 'token', 'started_at', 'quota_settled',
    'quota_charged')
  if not v[1] then return end
  if pq_settled(v[4], v[2]) then return end
  local ok, want = pcall(cjson.decode, v[1])
  if not ok or type(want) ~= 'table' then return end
  local started = tonumber(v[3]) or 0
  local charged = pq_settled(v[5], v[2]) or {}
  for name, units in pairs(want) do
    units = charged[name] or units
    local q = type(units) == 'table' and pq_load(name, now)
    if q and not q.remote and started >= q.window then
      local fields = {}
      for unit, amount in pairs(units) do
        local need = tonumber(amount) or 0
        if need > 0 and q.used[unit] then
          q.used[unit] = math.max(0, q.used[unit] - need)
          fields[#fields + 1] = 'used:' .. unit
          fields[#fields + 1] = q.used[unit]
        end
      end
      if #fields > 0 then redis.call('HSET', q.key, unpack(fields)) end
    end
  end
end

-- report: what running handlers told their worker (current_task().progress / report_cost),
-- batched: one call per worker per report interval, however chatty the handlers.
-- Arguments: ARG_* and RECORD(i) (signatures.Report, one Reported per report): task id,
--   claim token, progress JSON ('' = none), real cost ('' = none). Progress is stored
--   while that run holds the task (state running, same token), and when it completed the
--   task (state done, same token): a handler's last report may land just after its
--   outcome, and "step 3 of 3" must not read "step 1". A cost is settled for that run
--   (same token) in any state, since it may land just after the run's outcome: the
--   difference between it and what the task was charged so far (its cost, or the cost
--   reported before) goes back into the cost bucket, or is taken from it (the bucket may
--   go into debt of at most one capacity: claims then wait until it refills); under a
--   spend budget it is settled into the current day's and month's spend the same way. A
--   task of a group settles its group's cost bucket the same way.
-- Returns: a string of N characters: '1' applied, '0' refused (another run holds the task,
--   or it is gone).
--- @include "event"
--- @include "now_ms"
--- @include "cfg_num"
--- @include "quota_budget"
--- @include "quota_take"
--- @include "quota_save"
--- @include "group_settle"
local n = tonumber(ARG_N)
local now = now_ms()
local out = {}
local limit = cfg_num('rate_limit_cost') or 0
local settle = 0
local by_group = {}
for i = 1, n do
  local id, token, progress, cost = RECORD(i)
  cost = tonumber(cost)
  local key = K_TASK .. id
  local v = redis.call('HMGET', key, 'state', 'token', 'cost', 'cost_used', 'group')
  if v[2] ~= token then
    out[#out + 1] = '0'
  else
    local ok = true
    if progress ~= '' then
      if v[1] == 'running' or v[1] == 'done' then
        redis.call('HSET', key, 'progress', progress, 'progress_at', now)
        event('progress', id)
      else
        ok = false  -- it failed, or was cancelled: its last progress stands
      end
    end
    if cost ~= nil then
      local charged = tonumber(v[4]) or tonumber(v[3]) or 1
      settle = settle + (cost - charged)
      if v[5] and v[5] ~= '' then by_group[v[5]] = (by_group[v[5]] or 0) + (cost - charged) end
      redis.call('HSET', key, 'cost_used', cost)
      ok = true
    end
    out[#out + 1] = ok and '1' or '0'
  end
end
if limit > 0 and settle ~= 0 then
  local period_ms = cfg_num('rate_limit_period_s') * 1000
  local b = redis.call('HMGET', K_BUCKET_COST, 'tokens', 'ts')
  local tokens, ts = tonumber(b[1]), tonumber(b[2])
  if tokens == nil or ts == nil then tokens, ts = limit, now end
  tokens = math.min(limit, tokens + math.max(0, now - ts) * limit / period_ms)
  tokens = math.max(-limit, math.min(limit, tokens - settle))
  redis.call('HSET', K_BUCKET_COST, 'tokens', tostring(tokens), 'ts', now)
end
if settle ~= 0 then
  local q = quota_budget(K_QUOTA, now, cfg_num('budget_day') or 0, cfg_num('budget_month') or 0)
  quota_take(q, settle)
  quota_save(q)
end
group_settle(by_group, now)
return table.concat(out)

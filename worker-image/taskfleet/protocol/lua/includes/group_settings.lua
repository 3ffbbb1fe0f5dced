--- @include "cfg_num"
-- group_settings: one group's limits: its own (K_GROUP .. g, set at run time) where set,
-- else the queue's defaults for every group (config group_*). weight: its share of the
-- claims (1 when unset); cap: tasks running at once (0: none); tasks, cost: its rate
-- limits per rate_limit_period_s (0: none).
local function group_settings(g)
  local v = redis.call('HMGET', K_GROUP .. g, 'weight', 'max_concurrency', 'rate_limit_tasks',
    'rate_limit_cost')
  local function num(x, name, fallback)
    local n = tonumber(x)
    if n == nil or n ~= n or n == math.huge or n == -math.huge then
      if name then return cfg_num(name, fallback) end
      return fallback
    end
    return n
  end
  local s = {weight = num(v[1], nil, 1), cap = num(v[2], 'group_max_concurrency', 0),
    tasks = num(v[3], 'group_rate_limit_tasks', 0), cost = num(v[4], 'group_rate_limit_cost', 0)}
  if s.weight <= 0 then s.weight = 1 end
  return s
end

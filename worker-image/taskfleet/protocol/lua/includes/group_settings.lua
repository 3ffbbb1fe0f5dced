--- @include "cfg_num"
-- group_settings: one group's limits: its own (K_GROUP .. g, set at run time) where set,
-- else the queue's defaults for every group (config group_*). weight: its share of the
-- claims (1 when unset); cap: tasks running at once (0: none); tasks, cost: its rate
-- limits per rate_limit_period_s (0: none); quota: the group's claim pause and budget
-- fields, which live in the same hash (read here in the same call: quota_state's `raw`).
local function group_settings(g)
  local v = redis.call('HMGET', K_GROUP .. g, 'weight', 'max_concurrency', 'rate_limit_tasks',
    'rate_limit_cost', 'until', 'streak', 'day_limit', 'month_limit', 'day', 'day_spent',
    'month', 'month_spent')
  -- the group's own number, else the queue's for every group (nil: unset, read as 0, none)
  local function num(x, name)
    local n = tonumber(x)
    if n == nil or n ~= n or n == math.huge or n == -math.huge then
      return name and cfg_num(name)
    end
    return n
  end
  local s = {weight = num(v[1]) or 1, cap = num(v[2], 'group_max_concurrency'),
    tasks = num(v[3], 'group_rate_limit_tasks') or 0,
    cost = num(v[4], 'group_rate_limit_cost') or 0,
    quota = {v[5], v[6], v[7], v[8], v[9], v[10], v[11], v[12]}}
  if s.weight <= 0 then s.weight = 1 end
  return s
end

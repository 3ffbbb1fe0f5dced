--- @include "cfg_num"
--- @include "group_settings"
--- @include "group_bucket_load"
--- @include "group_bucket_store"
--- @include "group_quota"
--- @include "quota_take"
--- @include "quota_save"
-- group_settle: real costs reported for groups' tasks (group -> reported minus charged)
-- go back into, or are taken from, each group's cost bucket, as report does for the queue's,
-- and settle the group's budget spend (its own or the config's group_budget_*).
local function group_settle(by_group, now)
  local period_ms = cfg_num('rate_limit_period_s') * 1000
  for g, diff in pairs(by_group) do
    local s = group_settings(g)
    if s.cost > 0 and diff ~= 0 then
      local bt, bc = group_bucket_load(g, s, now, period_ms)
      bc = math.max(-s.cost, math.min(s.cost, bc - diff))
      group_bucket_store(g, bt, bc, now, period_ms)
    end
    local q = diff ~= 0 and group_quota(g, s, now)
    if q and q.budget then
      quota_take(q, diff)
      quota_save(q)
      -- spend given back: a group parked for its budget is looked at again by the next claim
      if diff < 0 then redis.call('ZADD', K_GROUPS_PARKED, 'XX', now, g) end
    end
  end
end

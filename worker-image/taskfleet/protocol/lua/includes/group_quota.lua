--- @include "cfg_num"
--- @include "quota_state"
--- @include "quota_budget"
-- group_quota: group g's claim pause and spend budget (its own quota fields, read with its
-- settings `s`): the quota record quota_wait and quota_take use, or nil when neither
-- applies (no pause holds and no budget, its own or the config's group_budget_*, is set).
local function group_quota(g, s, now)
  local q = quota_state(K_GROUP .. g, now, s.quota)
  q = quota_budget(q.key, now, cfg_num('group_budget_day') or 0, cfg_num('group_budget_month') or 0)
  if q.till <= now and not q.budget then return nil end
  return q
end

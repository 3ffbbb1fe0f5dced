--- @include "group_state"
--- @include "pending_remove"
--- @include "quota_take"
--- @include "group_spend"
-- group_took: the claim took task id (of group g, from zset src, at virtual time vt;
-- quotas: its `quotas` field, read only when groups are fair by spend)
local function group_took(st, g, vt, src, id, cost, quotas)
  local s = group_state(st, g)
  pending_remove(id, g)
  if g ~= '' then
    redis.call('HINCRBY', K_GROUP_RUNNING, g, 1)
    if s.running then s.running = s.running + 1 end
    if s.bt then s.bt = s.bt - 1 end
    if s.bc then s.bc = s.bc - math.min(cost, s.cost) end
    if s.bt or s.bc then s.dirty = true end
    if s.q then quota_take(s.q, cost) end
  end
  if redis.call('EXISTS', src) == 0 then
    redis.call('ZREM', K_GROUPS, g)
  else
    -- fair by spend or by claims, a task naming no quota moves its group on by 1: only
    -- one that names some reads K_GROUPS_FAIR (once a call: st.by, false when unset)
    local step = 1
    if quotas then
      if st.by == nil then st.by = redis.call('GET', K_GROUPS_FAIR) end
      if st.by then step = group_spend(quotas, st.by) end
    end
    redis.call('ZADD', K_GROUPS, 'XX', vt + step / s.weight, g)
  end
end

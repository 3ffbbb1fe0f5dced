--- @include "group_settings"
--- @include "group_bucket_load"
--- @include "group_quota"
-- this call's view of group g: settings, running count, buckets, and its pause and
-- budget (q), read once
local function group_state(st, g)
  local s = st.groups[g]
  if s then return s end
  if g == '' then
    s = {weight = 1, cap = 0, tasks = 0, cost = 0}
  else
    s = group_settings(g)
    if s.cap > 0 then s.running = tonumber(redis.call('HGET', K_GROUP_RUNNING, g)) or 0 end
    if s.tasks > 0 or s.cost > 0 then
      s.bt, s.bc = group_bucket_load(g, s, st.now, st.period_ms)
    end
    s.q = group_quota(g, s, st.now)
  end
  st.groups[g] = s
  return s
end

--- @include "group_bucket_store"
--- @include "quota_save"
-- group_done: end of the call: buckets and budgets' spend written back; returns ms until
-- the first group parked for a rate limit, a pause or a budget is due, at most 1000
-- (nil: none)
local function group_done(st)
  for g, s in pairs(st.groups) do
    if s.dirty then group_bucket_store(g, s.bt, s.bc, st.now, st.period_ms) end
    if s.q then quota_save(s.q) end
  end
  local first = redis.call('ZRANGE', K_GROUPS_PARKED, 0, 0, 'WITHSCORES')
  if #first > 0 and first[2] ~= 'inf' then
    -- at most a second: a group paused for an hour must not keep a worker from the
    -- ungrouped or new tasks meanwhile (its next claim finds the ring empty and idles)
    return math.min(1000, math.max(1, tonumber(first[2]) - st.now))
  end
  return nil
end

-- group_bucket: one group's token buckets (K_GROUP_BUCKET .. g: tasks, cost, ts), as the
-- queue's are kept: capacity = the limit, refilled continuously at limit / period; the
-- cost bucket may go into debt of one capacity. Absent: full. The hash expires once it
-- would be full again (two periods at most), so an idle group keeps nothing.
local function group_bucket_load(g, s, now, period_ms)
  local v = redis.call('HMGET', K_GROUP_BUCKET .. g, 'tasks', 'cost', 'ts')
  local ts = tonumber(v[3]) or now
  local gone = math.max(0, now - ts)
  local bt, bc
  if s.tasks > 0 then
    bt = math.min(s.tasks, (tonumber(v[1]) or s.tasks) + gone * s.tasks / period_ms)
  end
  if s.cost > 0 then
    bc = math.min(s.cost, (tonumber(v[2]) or s.cost) + gone * s.cost / period_ms)
  end
  return bt, bc
end

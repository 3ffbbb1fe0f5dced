-- quota_state: a quota hash (the queue's K_QUOTA, or a group's own hash K_GROUP .. g) read
-- once per script call and cached: the claim pause (`till`: ms until which nobody claims,
-- `streak`: rate limits in a row without a retry-after) and the raw budget fields, which
-- quota_budget reads. A queue that uses neither pays this one HMGET per call. `raw`: the
-- fields already read, in this order (a group's, with its settings: group_settings).
local QUOTA = {}
local function quota_state(key, now, raw)
  local q = QUOTA[key]
  if q then return q end
  local v = raw or redis.call('HMGET', key, 'until', 'streak', 'day_limit', 'month_limit',
    'day', 'day_spent', 'month', 'month_spent')
  q = {key = key, now = now, till = tonumber(v[1]) or 0, streak = tonumber(v[2]) or 0, raw = v}
  QUOTA[key] = q
  return q
end

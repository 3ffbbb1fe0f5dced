-- quota_state: a quota hash (the queue's K_QUOTA; one per group where groups exist) read
-- once per script call and cached: the claim pause (`till`: ms until which nobody claims,
-- `streak`: rate limits in a row without a retry-after) and the raw budget fields, which
-- quota_budget reads. A queue that uses neither pays this one HMGET per call.
local QUOTA = {}
local function quota_state(key, now)
  local q = QUOTA[key]
  if q then return q end
  local v = redis.call('HMGET', key, 'until', 'streak', 'day_limit', 'month_limit', 'day',
    'day_spent', 'month', 'month_spent')
  q = {key = key, now = now, till = tonumber(v[1]) or 0, streak = tonumber(v[2]) or 0, raw = v}
  QUOTA[key] = q
  return q
end

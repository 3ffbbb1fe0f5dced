-- quota_save: write what quota_take charged, once per call.
local function quota_save(q)
  if q.dirty then
    redis.call('HSET', q.key, 'day', q.day, 'day_spent', q.day_spent, 'month', q.month,
      'month_spent', q.month_spent)
    q.dirty = false
  end
end

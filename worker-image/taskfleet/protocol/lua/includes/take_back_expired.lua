--- @include "notify"
--- @include "take_back"
-- Running tasks whose lease ran out: their worker stopped heartbeating. Returns
-- (taken back to pending, gone dead).
local function take_back_expired(now, limit)
  local ids = redis.call('ZRANGEBYSCORE', K_RUNNING, '-inf', '(' .. now, 'LIMIT', 0, limit)
  local requeued, dead = 0, 0
  for _, id in ipairs(ids) do
    local key = K_TASK .. id
    local pod = redis.call('HGET', key, 'pod')
    local went = take_back(id, key, pod, now)
    if went == 'dead' then dead = dead + 1 elseif went == 'pending' then requeued = requeued + 1 end
  end
  notify(requeued)
  return requeued, dead
end


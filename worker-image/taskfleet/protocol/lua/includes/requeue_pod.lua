--- @include "notify"
--- @include "take_back"
-- Every task a pod holds, except those of incarnation keep (if given), is taken back.
local function requeue_pod(pod, keep, now)
  local ids = redis.call('SMEMBERS', K_POD .. pod)
  local requeued, dead = 0, 0
  for _, id in ipairs(ids) do
    local key = K_TASK .. id
    local v = redis.call('HMGET', key, 'state', 'pod', 'incarnation')
    if v[1] ~= 'running' or v[2] ~= pod then
      redis.call('SREM', K_POD .. pod, id)  -- a leftover: not held by this pod any more
    elseif keep == '' or v[3] ~= keep then
      local went = take_back(id, key, pod, now)
      if went == 'dead' then dead = dead + 1 elseif went == 'pending' then requeued = requeued + 1 end
    end
  end
  notify(requeued)
  return requeued, dead
end


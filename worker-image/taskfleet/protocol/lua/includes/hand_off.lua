--- @include "cfg_num"
--- @include "claim_tasks"
-- hand_off: claim up to `count` tasks, one for each of as many idle workers, and push each
-- onto its worker's wake list: the worker's blocking pop returns the claimed task itself,
-- one round trip sooner than a wake-up followed by a claim. Workers whose registration
-- ran out (gone, or busy again) are skipped. Returns how many tasks were handed over.
local function hand_off(now, count, token_base, bound)
  redis.call('ZREMRANGEBYSCORE', K_IDLE, '-inf', now)
  local handed = 0
  while handed < count do
    local newest = redis.call('ZRANGE', K_IDLE, -1, -1, 'WITHSCORES')
    if #newest == 0 then break end
    local member = newest[1]
    local cut = string.find(member, '\0', 1, true)
    if not cut then
      redis.call('ZREM', K_IDLE, member)  -- not ours: drop it
    else
      local pod, incarnation = string.sub(member, 1, cut - 1), string.sub(member, cut + 1)
      -- for_any: the record in the form the worker's record says it reads (tagged for
      -- claim_record 3, else positional): the producer's library may be newer than the
      -- worker it hands the task to
      local got = claim_tasks(now, pod, incarnation, 1, token_base .. '.' .. handed, bound, 0,
        nil, true)
      if got[1] == -1 then
        -- a replaced incarnation's registration (claim_tasks dropped it): nothing was
        -- claimed, and its pod's wake list is the successor's; on to the next one
      elseif #got < 4 then
        -- a limit held it back (or nothing is pending): the worker stays registered
        redis.call('ZADD', K_IDLE, newest[2], member)
        break
      else
        local wake = K_WAKE .. pod
        for i = 4, #got do redis.call('RPUSH', wake, got[i]) end
        -- a worker that died while registered never pops it: its lease ends it anyway
        redis.call('PEXPIRE', wake, math.floor(cfg_num('lease_ttl_s') * 1000))
        handed = handed + 1
      end
    end
  end
  return handed
end

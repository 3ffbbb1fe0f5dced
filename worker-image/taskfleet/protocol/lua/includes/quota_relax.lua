--- @include "quota_state"
-- quota_relax: a task succeeded under quota hash `key` while no pause holds: the next
-- pause without a retry-after is one doubling shorter.
local function quota_relax(key, now)
  local q = quota_state(key, now)
  if q.streak > 0 and q.till <= now then
    q.streak = q.streak - 1
    redis.call('HSET', key, 'streak', q.streak)
  end
end

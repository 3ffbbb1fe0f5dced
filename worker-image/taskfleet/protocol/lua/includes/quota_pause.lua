--- @include "cfg_num"
--- @include "bump"
--- @include "quota_state"
-- quota_pause: a provider's rate limit was met: nobody claims under quota hash `key`
-- until the returned time (ms). `asked`: the provider's retry-after in ms (nil: none
-- given; the pause is then throttle_base_s, doubled for each rate limit met in a row
-- after the last pause ended, capped at throttle_max_s; quota_relax undoes one doubling
-- per success). Rate limits met while a pause holds (requests already in flight) lengthen
-- it at most to their own pause and do not count as a new one.
local function quota_pause(key, now, asked, reason)
  local q = quota_state(key, now)
  local fresh = q.till <= now
  local ms = asked
  if ms == nil then
    if fresh then q.streak = q.streak + 1 end
    local base = cfg_num('throttle_base_s') * 1000
    local cap = cfg_num('throttle_max_s') * 1000
    ms = math.min(cap, base * 2 ^ (math.max(1, q.streak) - 1))
  end
  local till = now + math.floor(ms)
  if till > q.till then
    q.till = till
    redis.call('HSET', key, 'until', till, 'streak', q.streak, 'pause_ms', till - now,
      'reason', string.sub(reason or '', 1, 200), 'at', now)
  else
    till = q.till  -- a longer pause holds: it stays as it is
    redis.call('HSET', key, 'streak', q.streak)
  end
  if fresh then
    redis.call('HINCRBY', key, 'pauses', 1)
    bump('throttled')
  end
  return till
end

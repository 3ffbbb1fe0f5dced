-- group_pause: group g's claims are paused until `till` (ms; its own quota hash, K_GROUP
-- .. g, holds the pause): it leaves the fair ring for K_GROUPS_PARKED with that score
-- (kept when it is parked longer already; one at its concurrency cap, +inf, takes `till`:
-- the claim that brings it back then checks the cap again). O(log groups).
local function group_pause(g, till)
  redis.call('ZREM', K_GROUPS, g)
  local score = redis.call('ZSCORE', K_GROUPS_PARKED, g)
  if not score or score == 'inf' or tonumber(score) < till then
    redis.call('ZADD', K_GROUPS_PARKED, till, g)
  end
end

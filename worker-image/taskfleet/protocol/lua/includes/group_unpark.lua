--- @include "notify"
-- group_unpark: group g's pause or budget changed: if it is parked, the next claim looks
-- at it again (it rejoins the ring unless something still holds it back), and an idle
-- worker is woken to make that claim.
local function group_unpark(g, now)
  if redis.call('ZADD', K_GROUPS_PARKED, 'XX', 'CH', now, g) == 1 then notify(1) end
end

-- group_join: put a group with claimable tasks into the fair-claim ring (K_GROUPS), unless
-- it is there already or parked by its own limits (K_GROUPS_PARKED: it comes back from
-- there). It joins at the ring's current virtual time (its lowest score), so a group that
-- was idle gets no credit for the time it was away, and a new group waits behind none.
local function group_join(g)
  if redis.call('ZSCORE', K_GROUPS_PARKED, g) then return end
  local head = redis.call('ZRANGE', K_GROUPS, 0, 0, 'WITHSCORES')
  redis.call('ZADD', K_GROUPS, 'NX', head[2] or 0, g)
end

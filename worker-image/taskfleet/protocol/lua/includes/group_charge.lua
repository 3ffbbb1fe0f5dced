-- group_charge: a settlement of `diff` more (or, below 0, less) of the unit groups are fair
-- by than group g's task was charged so far: its virtual time in the fair-claim ring
-- moves by diff / its weight. A group not in the ring now (no task waiting, or parked)
-- keeps no correction: it rejoins at the ring's current time, with no credit nor debt.
local function group_charge(g, diff)
  if diff == 0 or not redis.call('ZSCORE', K_GROUPS, g) then return end
  local weight = g ~= '' and tonumber(redis.call('HGET', K_GROUP .. g, 'weight')) or 1
  if not weight or weight ~= weight or weight <= 0 or weight == math.huge then weight = 1 end
  redis.call('ZINCRBY', K_GROUPS, diff / weight, g)
end

-- group_park: group g leaves the ring until `hold` ms have passed (math.huge: until one of
-- its tasks leaves running)
local function group_park(st, g, hold)
  redis.call('ZREM', K_GROUPS, g)
  redis.call('ZADD', K_GROUPS_PARKED, hold == math.huge and 'inf' or st.now + hold, g)
  st.steps = st.steps + 1
end

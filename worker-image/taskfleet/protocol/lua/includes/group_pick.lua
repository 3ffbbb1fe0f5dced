-- group_pick: the next task of the fair order: id, the zset it waits in, its group and the
-- group's virtual time; nil when no group has one (or `bound` empty groups were met).
local function group_pick(st)
  while st.steps < st.bound do
    local head = redis.call('ZRANGE', K_GROUPS, 0, 0, 'WITHSCORES')
    if #head == 0 then return nil end
    local g = head[1]
    local src = g == '' and K_PENDING or K_GROUP_PENDING .. g
    local first = redis.call('ZRANGE', src, 0, 0)
    if #first > 0 then return first[1], src, g, tonumber(head[2]) end
    redis.call('ZREM', K_GROUPS, g)
    st.steps = st.steps + 1
  end
  return nil
end

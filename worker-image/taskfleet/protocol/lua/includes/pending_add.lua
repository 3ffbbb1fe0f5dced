--- @include "group_join"
-- pending_add: a task becomes pending with `score` (pending_score): an ungrouped one in
-- K_PENDING, as always; one of a group in that group's own zset, its group in the ring,
-- counted in K_GROUPS_PENDING (so that pending's size is two reads, whatever the groups).
local function pending_add(id, score, group)
  if group and group ~= '' then
    if redis.call('ZADD', K_GROUP_PENDING .. group, score, id) == 1 then
      redis.call('INCR', K_GROUPS_PENDING)
    end
    group_join(group)
  else
    redis.call('ZADD', K_PENDING, score, id)
  end
end

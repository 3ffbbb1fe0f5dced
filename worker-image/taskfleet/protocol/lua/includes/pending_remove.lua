-- pending_remove: a task leaves pending (claimed, cancelled, expired, a leftover) from
-- wherever it waits (group: nil or '' for K_PENDING). An
-- emptied group's ring entry is dropped by the next claim that meets it (group_pick).
local function pending_remove(id, group)
  if group and group ~= '' then
    if redis.call('ZREM', K_GROUP_PENDING .. group, id) == 1 then
      redis.call('DECR', K_GROUPS_PENDING)
    end
  else
    redis.call('ZREM', K_PENDING, id)
  end
end

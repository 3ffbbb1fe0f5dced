--- @include "flow_link"
--- @include "flow_end"
--- @include "flow_input"
--- @include "pending_remove"
-- A task just put in pending that names dependencies (`after`, the JSON array of its
-- field 'after'; `policy` its field 'on_dep_fail'). Done ones are satisfied, their results
-- handed to it (flow_input), and so is a missing one whose result it holds (field
-- 'in:<dep>': done, then deleted by retention); a dead,
-- cancelled or missing one applies the policy at once ('ignore': satisfied). Unfinished
-- ones get the task in their set dependants:<dep> (and the field 'dependants' = 1); then
-- the task leaves pending for 'waiting' with 'deps_left' = their count, until
-- flow_resolve counts it down. Every dependency that exists, whatever its state, gets
-- the field 'by:<id>' (flow_link): the link back that a flow's cancel or retry follows.
-- Returns true when it stays pending.
local function flow_hold(now, id, key, after, policy)
  local ok, deps = pcall(cjson.decode, after)
  if not ok or type(deps) ~= 'table' then deps = {} end
  -- Every dependency is linked first, so that one failing below leaves none unlinked.
  local unique, states, seen = {}, {}, {}
  for _, dep in ipairs(deps) do
    if not seen[dep] then
      seen[dep] = true
      local dkey = K_TASK .. dep
      local state = redis.call('HGET', dkey, 'state')
      if state then flow_link(dkey, id) end
      unique[#unique + 1] = dep
      states[#unique] = state or false
    end
  end
  local open = {}
  for i, dep in ipairs(unique) do
    local state = states[i]
    if state == 'done' then
      flow_input(key, dep, redis.call('HGET', K_TASK .. dep, 'result'))
    elseif not state and redis.call('HEXISTS', key, 'in:' .. dep) == 1 then
      -- deleted by retention, but it handed its result here: it was done (a parent
      -- retried after its done children were dropped under done_retention_s 0)
    elseif not state or state == 'dead' or state == 'cancelled' then
      if policy ~= 'ignore' then
        flow_end(id, key, now, policy, dep, state or 'missing')
        return false
      end
    else
      open[#open + 1] = dep
    end
  end
  if #open == 0 then return true end
  for _, dep in ipairs(open) do
    redis.call('SADD', K_DEPENDANTS .. dep, id)
    redis.call('HSET', K_TASK .. dep, 'dependants', 1)
  end
  pending_remove(id, redis.call('HGET', key, 'group'))
  redis.call('ZREM', K_DELAYED, id)
  redis.call('ZADD', K_WAITING, now, id)
  redis.call('HSET', key, 'state', 'waiting', 'deps_left', #open)
  return false
end

--- @include "flow_input"
-- A running task (`parent`) adds `child` at run time (enqueue with parent): it now waits
-- for it too (field 'join': when its handler returns it is done only once every child
-- is). Idempotent: a child adopted before is left alone (its link back, 'by:<parent>'
-- (flow_link), says so). A child already done hands its
-- result; one dead or cancelled marks the parent ('dep_failed', its policy applies when
-- its run ends) unless the parent's policy is 'ignore'. Returns whether the child is new
-- to the parent: the caller appends those to its 'after' once per call (flow_append).
local function flow_adopt(pkey, parent, child)
  local ckey = K_TASK .. child
  local state = redis.call('HGET', ckey, 'state')
  -- adopted before (a run started again adds the same children): its link back is there
  -- and the parent's 'after' names it already
  local known = false
  if state then known = redis.call('HSETNX', ckey, 'by:' .. parent, 1) == 0 end
  if state == 'done' then
    if redis.call('HEXISTS', pkey, 'in:' .. child) == 0 then
      flow_input(pkey, child, redis.call('HGET', ckey, 'result'))
    end
  elseif not state or state == 'dead' or state == 'cancelled' then
    if redis.call('HGET', pkey, 'on_dep_fail') ~= 'ignore' then
      redis.call('HSETNX', pkey, 'dep_failed', 'dependency ' .. child .. ' ended ' .. (state or 'missing'))
    end
  elseif redis.call('SADD', K_DEPENDANTS .. child, parent) == 1 then
    redis.call('HSET', ckey, 'dependants', 1)
    redis.call('HINCRBY', pkey, 'deps_left', 1)
  else
    return false
  end
  return not known
end

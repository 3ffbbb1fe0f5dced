--- @include "group_state"
--- @include "quota_wait"
-- group_hold: ms group g must wait before its next task (cost: that task's), math.huge at
-- its concurrency cap, or nil when it may run now. A group paused (or its budget spent)
-- waits for the pause's end (the period's end), parked: no claim walks it meanwhile.
local function group_hold(st, g, cost)
  local s = group_state(st, g)
  if s.running and s.running >= s.cap then return math.huge end
  local wait = s.q and quota_wait(s.q, cost) or 0
  if s.bt and s.bt < 1 then
    wait = math.max(wait, math.ceil((1 - s.bt) * st.period_ms / s.tasks))
  end
  if s.bc then
    local need = math.min(cost, s.cost)
    if s.bc < need then
      wait = math.max(wait, math.ceil((need - s.bc) * st.period_ms / s.cost))
    end
  end
  if wait > 0 then return wait end
  return nil
end

--- @include "flow_q"
-- Take up one finished task whose dependants a call left unresolved (flow_resolve's
-- budget): they are resolved when the script flushes its counts. `budget`: dependants
-- this call may resolve (nil: flow_resolve's own); a sweep gives its bound, and takes up
-- as many entries as that may need.
local function flow_backlog(budget)
  FLOW_Q.budget = budget
  local entries = 1
  if budget then entries = math.max(1, math.floor(budget / 200)) end
  for _ = 1, entries do
    local entry = redis.call('LPOP', K_FLOW_BACKLOG)
    if not entry then return end
    FLOW_Q[#FLOW_Q + 1] = entry
  end
end

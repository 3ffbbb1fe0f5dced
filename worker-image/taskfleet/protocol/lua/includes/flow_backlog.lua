--- @include "flow_q"
-- Take up one finished task whose dependants a call left unresolved (flow_resolve's
-- budget): they are resolved when the script flushes its counts.
local function flow_backlog()
  local entry = redis.call('LPOP', K_FLOW_BACKLOG)
  if entry then FLOW_Q[#FLOW_Q + 1] = entry end
end

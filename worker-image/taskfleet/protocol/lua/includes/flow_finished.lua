--- @include "flow_q"
--- @include "flow_member_end"
-- A task finished with `outcome` ('d' done, 'x' dead, 'c' cancelled); `mark` is its
-- 'dependants' field, set when some task waits on it; `result` its result when done here;
-- `flow` its field 'flow' (read with the others), set when it is a flow's member: the
-- flow counts it (flow_member_end). A task nobody waits on, in no flow, costs nothing.
local function flow_finished(id, outcome, mark, result, flow)
  if mark then
    FLOW_Q[#FLOW_Q + 1] = outcome .. id
    if result then FLOW_Q.results[id] = result end
  end
  if flow then flow_member_end(flow, outcome) end
end

--- @include "flow_q"
-- A task finished with `outcome` ('d' done, 'x' dead, 'c' cancelled); `mark` is its
-- 'dependants' field, set when some task waits on it; `result` its result when done here.
-- A task nobody waits on costs nothing.
local function flow_finished(id, outcome, mark, result)
  if mark then
    FLOW_Q[#FLOW_Q + 1] = outcome .. id
    if result then FLOW_Q.results[id] = result end
  end
end

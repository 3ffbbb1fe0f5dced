--- @include "flow_q"
-- A task finished with `outcome` ('d' done, 'x' dead, 'c' cancelled); `mark` is its
-- 'dependants' field, set when some task waits on it. A task nobody waits on costs nothing.
local function flow_finished(id, outcome, mark)
  if mark then FLOW_Q[#FLOW_Q + 1] = outcome .. id end
end

--- @include "flow_q"
--- @include "flush_stats"
--- @include-lazy "flow_resolve"
local function flush_counts()
  if #FLOW_Q > 0 then flow_resolve() end  -- dependants of tasks finished in this call
  flush_stats()
end

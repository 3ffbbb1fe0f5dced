--- @include "counts"
--- @include "flow_q"
--- @include-lazy "flow_resolve"
local function flush_counts()
  if #FLOW_Q > 0 then flow_resolve() end  -- dependants of tasks finished in this call
  for field, n in pairs(COUNTS) do
    if n ~= 0 then redis.call('HINCRBY', K_STATS, field, n) end
  end
  COUNTS = {}
end


--- @include "counts"
-- flush_stats: write the counters summed in this call (COUNTS) to K_STATS, one HINCRBY a
-- field; a script of plain tasks calls it alone, having no flows to resolve.
local function flush_stats()
  for field, n in pairs(COUNTS) do
    if n ~= 0 then redis.call('HINCRBY', K_STATS, field, n) end
  end
  COUNTS = {}
end

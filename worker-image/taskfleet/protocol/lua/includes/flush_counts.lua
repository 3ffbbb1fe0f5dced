--- @include "counts"
local function flush_counts()
  for field, n in pairs(COUNTS) do
    if n ~= 0 then redis.call('HINCRBY', K_STATS, field, n) end
  end
  COUNTS = {}
end


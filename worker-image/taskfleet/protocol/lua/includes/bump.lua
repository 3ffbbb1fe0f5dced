--- @include "counts"
local function bump(field, n)
  COUNTS[field] = (COUNTS[field] or 0) + (n or 1)
end

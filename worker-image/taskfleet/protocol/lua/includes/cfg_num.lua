--- @include "cfg"
-- A config number, or fallback when it is absent, not a number or not finite: a nan or
-- inf written by a foreign client must not break every claim of the fleet.
local function cfg_num(name, fallback)
  local v = tonumber(cfg(name))
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return fallback end
  return v
end


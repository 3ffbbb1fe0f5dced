--- @include "cfg"
-- A config number: the stored one, else the field's default (DEFAULTS, generated from the
-- table of defaults) when it is absent, not a number or not finite: a nan or inf written
-- by a foreign client must not break every claim of the fleet. nil for a field unset by
-- default: a caller reads an unset limit as the table's `off` (0, no limit) with `or 0`.
local function cfg_num(name)
  local v = tonumber(cfg(name))
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return tonumber(DEFAULTS[name]) end
  return v
end

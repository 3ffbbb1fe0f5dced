-- Two stored values are the same when their texts are, or both are the same number (a
-- foreign writer may have stored '5.0' for 5); absent and '' are the same.
local function same_value(stored, given)
  if stored == false or stored == nil then stored = '' end
  if stored == given then return true end
  local a, b = tonumber(stored), tonumber(given)
  return a ~= nil and a == b
end


-- group_spend: what a claim charges a group's virtual time when groups are fair by spend:
-- the task's estimate of unit `by`, summed over the provider quotas it names (`quotas`, its
-- JSON field), or 1 when it estimates none, so a group of such tasks still takes turns.
-- Its settlement corrects the charge to the real use (group_charge).
local function group_spend(quotas, by)
  local ok, want = pcall(cjson.decode, quotas or '')
  local sum = 0
  if ok and type(want) == 'table' then
    for _, units in pairs(want) do
      local n = type(units) == 'table' and tonumber(units[by])
      if n and n > 0 then sum = sum + n end
    end
  end
  if sum > 0 then return sum end
  return 1
end

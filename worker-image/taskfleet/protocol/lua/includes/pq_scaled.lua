-- pq_scaled: a quota learns how far its tasks' estimates fall short. Per unit, the quota's
-- field `scale:<unit>` (absent: 1) is the running mean of settled use / estimate, halved
-- toward each run's first settlement, never below 1 (an estimate above the use only
-- wastes room) nor above 100 (pq_learn). Admission (pq_admit, pq_run) charges an estimate
-- times its unit's scale, so tasks that settle three times their estimate stop
-- overrunning the limit after the first few settle, instead of each window's debt.
-- units times their scale (whole amounts, rounded up); differs: some amount was scaled
local function pq_scaled(q, units)
  local out, differs = {}, false
  for unit, amount in pairs(units) do
    local need = tonumber(amount) or 0
    local s = q.scale[unit]
    if s and s > 1 and need > 0 then
      need = math.ceil(need * s)
      differs = true
    end
    out[unit] = need
  end
  return out, differs
end

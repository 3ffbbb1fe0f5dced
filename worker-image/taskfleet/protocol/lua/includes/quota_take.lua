-- Charge `cost` to the periods' spend (negative: give back; a settlement); written by
-- quota_save, once per call.
local function quota_take(q, cost)
  if q.budget and cost ~= 0 then
    q.day_spent = math.max(0, q.day_spent + cost)
    q.month_spent = math.max(0, q.month_spent + cost)
    q.dirty = true
  end
end

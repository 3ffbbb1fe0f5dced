-- ms until a task costing `cost` may be claimed under quota `q` (0: now): the pause's
-- end, or the end of the period whose budget it would exceed. A task costing more than a
-- whole budget runs when nothing of the period is spent yet.
local function quota_wait(q, cost)
  local now = q.now
  if q.till > now then return q.till - now end
  if q.budget then
    if q.day_limit > 0 and q.day_spent > 0 and q.day_spent + cost > q.day_limit then
      return q.day_end - now
    end
    if q.month_limit > 0 and q.month_spent > 0 and q.month_spent + cost > q.month_limit then
      return q.month_end - now
    end
  end
  return 0
end

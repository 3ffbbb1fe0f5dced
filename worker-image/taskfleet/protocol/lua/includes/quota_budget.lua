--- @include "quota_state"
--- @include "quota_period"
-- quota_budget: the spend budget of quota hash `key`: its day and month limits (the
-- hash's run-time `day_limit` / `month_limit` when set, '0' = none; else the defaults
-- given, from the config) and this period's spend (a stored spend of an earlier day or
-- month counts as 0: the period rolled over at its UTC boundary). Returns the cached
-- state with `budget` true when a limit applies, else with `budget` false.
local function quota_budget(key, now, day_default, month_default)
  local q = quota_state(key, now)
  if q.budget ~= nil then return q end
  local v = q.raw
  local dl, ml = tonumber(v[3]) or day_default or 0, tonumber(v[4]) or month_default or 0
  q.day_limit, q.month_limit = dl, ml
  q.budget = dl > 0 or ml > 0
  if q.budget then
    q.day, q.day_end, q.month, q.month_end = quota_period(now)
    q.day_spent = v[5] == q.day and (tonumber(v[6]) or 0) or 0
    q.month_spent = v[7] == q.month and (tonumber(v[8]) or 0) or 0
  end
  return q
end

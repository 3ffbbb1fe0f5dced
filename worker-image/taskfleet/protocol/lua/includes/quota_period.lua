-- quota_period: the UTC day and calendar month `now` (epoch ms) falls in, and when each
-- ends: day 'YYYY-MM-DD', its end (ms), month 'YYYY-MM', its end (ms). Proleptic
-- Gregorian calendar (days <-> civil date as in H. Hinnant's chrono algorithms).
local function quota_period(now)
  local DAY_MS = 86400000
  local days = math.floor(now / DAY_MS)
  local z = days + 719468
  local era = math.floor(z / 146097)
  local doe = z - era * 146097
  local yoe = math.floor((doe - math.floor(doe / 1460) + math.floor(doe / 36524)
    - math.floor(doe / 146096)) / 365)
  local doy = doe - (365 * yoe + math.floor(yoe / 4) - math.floor(yoe / 100))
  local mp = math.floor((5 * doy + 2) / 153)
  local d = doy - math.floor((153 * mp + 2) / 5) + 1
  local m = mp < 10 and mp + 3 or mp - 9
  local y = yoe + era * 400
  if m <= 2 then y = y + 1 end
  -- the first day of the next month, back to days since the epoch
  local ny, nm = y, m + 1
  if nm > 12 then ny, nm = y + 1, 1 end
  local yy = nm <= 2 and ny - 1 or ny
  local nera = math.floor(yy / 400)
  local nyoe = yy - nera * 400
  local nmp = nm > 2 and nm - 3 or nm + 9
  local ndoy = math.floor((153 * nmp + 2) / 5)
  local ndoe = nyoe * 365 + math.floor(nyoe / 4) - math.floor(nyoe / 100) + ndoy
  local next_month = nera * 146097 + ndoe - 719468
  return string.format('%04d-%02d-%02d', y, m, d), (days + 1) * DAY_MS,
    string.format('%04d-%02d', y, m), next_month * DAY_MS
end

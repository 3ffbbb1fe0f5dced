-- pq_live: how many concurrency reservations of provider quota `q` are live. On a single
-- server (q.here): its holds, after dropping those whose task no longer runs under the
-- reservation's token, or whose lease ran out (a lost worker's): a reservation ends with
-- its run, whatever ends it. O(reservations); read only when the cap may be reached.
-- Plus the runs reserved from other slots (q.nruns, pq_load: expired ones are dropped).
local function pq_live(q, now)
  if not q.here then return q.nruns end
  local hkey = K_PQUOTA_HOLDS .. q.name
  local members = redis.call('ZRANGE', hkey, 0, -1)
  local gone = {}
  for _, m in ipairs(members) do
    local cut = string.find(m, '\0', 1, true)
    local live = false
    if cut then
      local v = redis.call('HMGET', string.sub(m, 1, cut - 1), 'state', 'token', 'lease_until')
      live = v[1] == 'running' and v[2] == string.sub(m, cut + 1)
        and (tonumber(v[3]) or 0) >= now
    end
    if not live then gone[#gone + 1] = m end
  end
  if #gone > 0 then redis.call('ZREM', hkey, unpack(gone)) end
  return #members - #gone + q.nruns
end

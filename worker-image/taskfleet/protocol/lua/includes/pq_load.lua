-- pq_load: provider quota `name` (K_PQUOTA .. name, shared by every queue) read once per
-- call and cached: period_ms, max_concurrency (0: none), the pause (`till`, ms), limits,
-- this window's use per unit and each unit's learned scale (pq_scaled). Windows are fixed, period_ms long from the epoch; at a
-- new window each unit's use drops by its limit per window passed, never below 0: an
-- overrun (a settlement above the estimate) is debt the next windows wait out.
-- q.here: the quota's hash and its holds answer in one command (a single server). On a
-- Redis Cluster they lie in two slots: a queue's script gets {remote = true} without
-- reading anything, and a call sent to the quota's slot (`on_slot`: pq_run and
-- provider_quota, sent with the hash as their key) reads the hash but never the holds. There, runs reserve through pq_run: q.runs, the `run:<member>`
-- fields still live ({u = until, t = claimed at, s = settled, by = charged}); expired
-- ones are dropped here, so whoever reads the quota returns a lost worker's reservation.
-- Returns nil when the quota does not exist (nothing to reserve or wait for).
local PQ = {}
local function pq_load(name, now, on_slot)
  local q = PQ[name]
  if q ~= nil then return q or nil end
  local key = K_PQUOTA .. name
  -- two keys of two slots in one command: refused on a cluster, wherever they lie
  local here = type(redis.pcall('EXISTS', key, K_PQUOTA_HOLDS .. name)) ~= 'table'
  -- on a cluster only a call sent to the quota's slot (`on_slot`) reads it
  if not here and not on_slot then
    PQ[name] = {name = name, remote = true}
    return PQ[name]
  end
  local flat = redis.call('HGETALL', key)
  if #flat == 0 then PQ[name] = false return nil end
  q = {name = name, key = key, limits = {}, used = {}, scale = {}, till = 0, conc = 0,
    period = 60000, here = here, runs = {}, nruns = 0}
  local raw, gone = {}, {}
  for i = 1, #flat, 2 do
    local f, v = flat[i], flat[i + 1]
    local unit = string.match(f, '^limit:(.+)$')
    if unit then
      q.limits[unit] = tonumber(v) or 0
    else
      unit = string.match(f, '^used:(.+)$')
      if unit then
        q.used[unit] = tonumber(v) or 0
      elseif string.sub(f, 1, 6) == 'scale:' then
        q.scale[string.sub(f, 7)] = tonumber(v) or 1
      elseif string.sub(f, 1, 4) == 'run:' then
        local ok, r = pcall(cjson.decode, v)
        if ok and type(r) == 'table' and (tonumber(r.u) or 0) >= now then
          q.runs[string.sub(f, 5)] = r
          q.nruns = q.nruns + 1
        else
          gone[#gone + 1] = f
        end
      else
        raw[f] = v
      end
    end
  end
  if #gone > 0 then redis.call('HDEL', key, unpack(gone)) end
  q.period = math.max(1, tonumber(raw.period_ms) or 60000)
  q.conc = tonumber(raw.concurrency) or 0
  q.till = tonumber(raw['until']) or 0
  q.window = math.floor(now / q.period) * q.period
  q.window_end = q.window + q.period
  local was = tonumber(raw.window) or q.window
  if was < q.window then
    local passed = math.floor((q.window - was) / q.period)
    local fields = {'window', q.window}
    for unit, used in pairs(q.used) do
      local left = math.max(0, used - (q.limits[unit] or 0) * passed)
      q.used[unit] = left
      fields[#fields + 1] = 'used:' .. unit
      fields[#fields + 1] = left
    end
    redis.call('HSET', key, unpack(fields))
  elseif raw.window == nil then
    redis.call('HSET', key, 'window', q.window)
  end
  PQ[name] = q
  return q
end

-- provider_quota: configure, read, pause or resume a provider quota shared by every queue
-- of this Redis (K_PQUOTA .. name; includes/pq_*.lua; docs/quotas.md). Sent with the
-- quota's hash as its one key, so a Redis Cluster routes it to the quota's slot.
-- Arguments: ARG_* (signatures.ProviderQuota). op:
--   'configure': limits (JSON object unit -> units per period, every one > 0; the units
--     it names replace those set before), period_ms (> 0), max_concurrency (0: none);
--     use and pause are kept;
--   'get': nothing changed but expired reservations dropped;
--   'pause': nobody claims a task naming the quota for pause_ms, or longer if a pause
--     already holds; reason is shown with it;
--   'resume': the pause ends now.
-- Returns: [] when the quota does not exist (configure creates it); else [period_ms,
--   max_concurrency, reservations live, until (ms; 0 = no pause), window start (ms),
--   reason, then unit, limit, used per unit].
--- @include "now_ms"
--- @include "pq_load"
--- @include "pq_live"
local now = now_ms()
local name = ARG_NAME
local key = K_PQUOTA .. name
local op = ARG_OP
if op == 'configure' then
  local old = redis.call('HKEYS', key)
  local drop = {}
  for _, f in ipairs(old) do
    if string.sub(f, 1, 6) == 'limit:' then drop[#drop + 1] = f end
  end
  if #drop > 0 then redis.call('HDEL', key, unpack(drop)) end
  local fields = {'period_ms', ARG_PERIOD_MS, 'concurrency', ARG_MAX_CONCURRENCY}
  for unit, limit in pairs(cjson.decode(ARG_LIMITS)) do
    fields[#fields + 1] = 'limit:' .. unit
    fields[#fields + 1] = limit
  end
  redis.call('HSET', key, unpack(fields))
elseif op == 'pause' or op == 'resume' then
  if redis.call('EXISTS', key) == 0 then return {} end
  if op == 'pause' then
    local till = now + tonumber(ARG_PAUSE_MS)
    local was = tonumber(redis.call('HGET', key, 'until')) or 0
    if till > was then
      redis.call('HSET', key, 'until', till, 'reason', string.sub(ARG_REASON or '', 1, 200))
    end
    redis.call('HINCRBY', key, 'pauses', 1)
  else
    redis.call('HSET', key, 'until', 0, 'reason', '')
  end
end
local q = pq_load(name, now, true)
if not q then return {} end
local live = q.nruns
if q.here then live = live + redis.call('ZCARD', K_PQUOTA_HOLDS .. name) end
if live > 0 then live = pq_live(q, now) end
local out = {q.period, q.conc, live, q.till > now and q.till or 0, q.window,
  q.till > now and (redis.call('HGET', key, 'reason') or '') or ''}
local units = {}
for unit in pairs(q.limits) do units[#units + 1] = unit end
for unit in pairs(q.used) do if not q.limits[unit] then units[#units + 1] = unit end end
table.sort(units)
for _, unit in ipairs(units) do
  out[#out + 1] = unit
  out[#out + 1] = q.limits[unit] or 0
  out[#out + 1] = q.used[unit] or 0
end
return out

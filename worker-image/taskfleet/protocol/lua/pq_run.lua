-- pq_run: a run's reservation of a provider quota kept on the quota's own slot, for a
-- queue in another slot of a Redis Cluster (docs/protocol.md 4.17). The claim leaves such
-- a task's quotas to the worker, whose run holds a reservation field `run:<member>` in
-- the quota's hash (member: '<task key>\0<claim token>'), with an expiry the worker's
-- heartbeat pushes on. Whoever reads the quota drops an expired one (pq_load): a dead
-- worker's reservation ends one lease after its last heartbeat, its charge kept.
-- Sent with the quota's hash as its one key. Arguments: ARG_* (signatures.PqRun). op:
--   'reserve' (one member): admit `units` (the estimate, {unit: amount}) as a claim does
--     (pq_admit's rules), charge it, and record the run until now + lease_ms; a member
--     already recorded is not charged again (a reply lost, the call sent again);
--   'settle' (one member): the run really used `units`: the difference from what it was
--     charged so far is charged, or given back while the window it reserved in lasts;
--   'extend': each member's expiry becomes now + lease_ms;
--   'end': each member's reservation ends; with refund 1 its charge goes back, unless it
--     settled or the window it reserved in has passed (a run given back, not an attempt).
-- Returns: 'reserve': 0 reserved, or ms to wait (> 0, at most PQ_MAX_WAIT_MS) before a
--   claim tries again, or -2 no such quota (nothing reserved: the run goes on unreserved,
--   as a claim does); 'settle': 1 settled, 0 no such reservation (the run ended or was
--   lost), -2 no such quota; 'extend', 'end': how many members were found.
--- @include "now_ms"
--- @include "pq_load"
--- @include "pq_live"
--- @include "pq_scaled"
--- @include "pq_learn"
local PQ_MAX_WAIT_MS = 5000
local PQ_CONC_WAIT_MS = 500
local now = now_ms()
local q = pq_load(ARG_NAME, now, true)
if not q or q.remote then return -2 end
local op = ARG_OP
local lease = tonumber(ARG_LEASE_MS) or 0

local function charge(by, sign)
  local fields = {}
  for unit, amount in pairs(by) do
    local need = tonumber(amount) or 0
    if need ~= 0 then
      q.used[unit] = math.max(0, (q.used[unit] or 0) + sign * need)
      fields[#fields + 1] = 'used:' .. unit
      fields[#fields + 1] = q.used[unit]
    end
  end
  if #fields > 0 then redis.call('HSET', q.key, unpack(fields)) end
end

if op == 'reserve' then
  local member = RECORD(1)
  if q.runs[member] then return 0 end
  local estimate = cjson.decode(ARG_UNITS)
  local units = pq_scaled(q, estimate)
  local wait = 0
  if q.till > now then wait = q.till - now end
  if wait == 0 then
    for unit, amount in pairs(units) do
      local limit, used = q.limits[unit], q.used[unit] or 0
      local need = tonumber(amount) or 0
      if limit and limit > 0 and need > 0 and used > 0 and used + need > limit then
        wait = q.window_end - now
        break
      end
    end
  end
  if wait == 0 and q.conc > 0 and pq_live(q, now) >= q.conc then wait = PQ_CONC_WAIT_MS end
  if wait > 0 then return math.min(wait, PQ_MAX_WAIT_MS) end
  charge(units, 1)
  redis.call('HSET', q.key, 'run:' .. member,
    cjson.encode({u = now + lease, t = now, s = 0, by = units, e = estimate}))
  return 0
end

local found = 0
for i = 1, tonumber(ARG_N) do
  local member = RECORD(i)
  local r = q.runs[member]
  if r then
    found = found + 1
    local f = 'run:' .. member
    if op == 'settle' then
      local used = cjson.decode(ARG_UNITS)
      if r.s == 0 and type(r.e) == 'table' then pq_learn(q, r.e, used) end
      local same_window = (tonumber(r.t) or 0) >= q.window
      local diffs = {}
      for unit, amount in pairs(used) do
        local diff = amount - (tonumber(r.by[unit]) or 0)
        if diff < 0 and not same_window then diff = 0 end
        diffs[unit] = diff
        r.by[unit] = amount
      end
      charge(diffs, 1)
      r.s = 1
      redis.call('HSET', q.key, f, cjson.encode(r))
    elseif op == 'extend' then
      r.u = now + lease
      redis.call('HSET', q.key, f, cjson.encode(r))
    elseif op == 'end' then
      if ARG_REFUND == '1' and r.s == 0 and (tonumber(r.t) or 0) >= q.window then
        charge(r.by, -1)
      end
      redis.call('HDEL', q.key, f)
    end
  end
end
if op == 'settle' and found == 0 then return 0 end
return found

-- sweep: the housekeeping pass of the operator (workers do the first three in claim).
-- Arguments: ARG_BOUND (signatures.Sweep): max tasks handled per step and call (call again
--   while counts are at it); expiry, whose tasks cost several times what the other steps'
--   do, handles at most a tenth of it (EXPIRE_SHARE; claims clear a backlog as they go).
-- Returns: {promoted, expired, requeued, lost_dead, pruned_done, pruned_dead,
--   workers_dropped, pruned_cancelled}; cancelled tasks are kept dead_retention_s, like
--   dead ones (someone may want to see what was cancelled and when)
--- @include "now_ms"
--- @include "cfg_num"
--- @include "flush_counts"
--- @include "promote_due"
--- @include "expire_deadlines"
--- @include "take_back_expired"
--- @include "flow_backlog"
--- @include "flow_prune"
--- @include "flows_expire"
local bound = tonumber(ARG_BOUND)
local now = now_ms()
local promoted = promote_due(now, bound)
local EXPIRE_SHARE = 10  -- as scripts.SWEEP_EXPIRE_SHARE
local expired = expire_deadlines(now, math.max(1, math.floor(bound / EXPIRE_SHARE)))
local requeued, lost_dead = take_back_expired(now, bound)
flow_backlog(bound)

-- (a flow's members stay until a retention after the flow ends: flow_prune)
local function prune(zkey, retention_s)
  local cutoff = now - retention_s * 1000
  local ids = redis.call('ZRANGEBYSCORE', zkey, '-inf', cutoff, 'LIMIT', 0, bound)
  return flow_prune(zkey, ids, now, cutoff)
end
local pruned_done = prune(K_DONE, cfg_num('done_retention_s'))
local pruned_dead = prune(K_DEAD, cfg_num('dead_retention_s'))
local pruned_cancelled = prune(K_CANCELLED, cfg_num('dead_retention_s'))
flows_expire(now, bound)

-- A worker silent for 3 lease TTLs is gone; its leases expired long ago.
local stale_before = now - 3 * cfg_num('lease_ttl_s') * 1000
local dropped = 0
local flat = redis.call('HGETALL', K_WORKERS)
for i = 1, #flat, 2 do
  local ok, w = pcall(cjson.decode, flat[i + 1])
  if not ok or type(w) ~= 'table' or (tonumber(w.heartbeat_ms) or 0) < stale_before then
    redis.call('HDEL', K_WORKERS, flat[i])
    dropped = dropped + 1
  end
end
flush_counts()
return {promoted, expired, requeued, lost_dead, pruned_done, pruned_dead, dropped,
  pruned_cancelled}

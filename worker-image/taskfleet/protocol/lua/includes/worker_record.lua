-- host: the worker's whereabouts (identity.py), opaque here; '' records none.
-- level: what this release's workers serve (records.WORKER_LEVEL; none = 0.1.x, level 1).
-- claim_record: the claim record form the worker reads (claim_tasks.lua; records.CLAIM_RECORD):
--   a producer's hand-off to it is written in that form (none: the positional one).
-- held: slots kept by calls the worker gave up on (their task ended); written when > 0.
local function worker_record(incarnation, now, inflight, concurrency, draining, host, held)
  local record = {
    incarnation = incarnation,
    heartbeat_ms = now,
    inflight = tonumber(inflight) or 0,
    concurrency = tonumber(concurrency) or 0,
    draining = draining == '1',
    level = 3,
    claim_record = 3,
  }
  if host ~= nil and host ~= '' then record.host = host end
  local kept = tonumber(held)
  if kept and kept > 0 then record.held = kept end
  return cjson.encode(record)
end


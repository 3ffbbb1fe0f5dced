-- host: the worker's whereabouts (identity.py), opaque here; '' records none.
-- level: what this release's workers serve (records.WORKER_LEVEL; none = 0.1.x, level 1).
-- held: slots kept by calls the worker gave up on (their task ended); written when > 0.
local function worker_record(incarnation, now, inflight, concurrency, draining, host, held)
  local record = {
    incarnation = incarnation,
    heartbeat_ms = now,
    inflight = tonumber(inflight) or 0,
    concurrency = tonumber(concurrency) or 0,
    draining = draining == '1',
    level = 3,
  }
  if host ~= nil and host ~= '' then record.host = host end
  local kept = tonumber(held)
  if kept and kept > 0 then record.held = kept end
  return cjson.encode(record)
end


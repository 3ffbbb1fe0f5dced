--- @include "cfg_num"
-- older_worker: the name of a live worker of the queue whose record has no level >= 2 (a
-- worker of 0.1.x, which mishandles flows, groups, claim pauses and spend budgets without
-- an error), or nil. Live as readers judge it (records.WorkerRecord.alive): its heartbeat
-- within one lease TTL of now. A record that is not a JSON object is nobody's: skipped.
-- Called only by a call that uses one of those features, never on a plain path. A record
-- that says '"level":2' (as worker_record writes it; JSON escapes any quote inside a
-- string, so no value can hold those characters) is not decoded.
local function older_worker(now)
  local live_from = now - cfg_num('lease_ttl_s', 30) * 1000
  local flat = redis.call('HGETALL', K_WORKERS)
  for i = 1, #flat, 2 do
    local raw = flat[i + 1]
    if not string.find(raw, '"level":2', 1, true) then
      local ok, w = pcall(cjson.decode, raw)
      if ok and type(w) == 'table' and (tonumber(w.level) or 1) < 2
        and (tonumber(w.heartbeat_ms) or -math.huge) >= live_from then
        return flat[i]
      end
    end
  end
  return nil
end

--- @include "cfg_num"
-- older_worker: the name of a live worker of the queue whose record has no level >= 2 (a
-- worker of 0.1.x, which mishandles flows, groups, claim pauses and spend budgets without
-- an error), or nil. Live as readers judge it (records.WorkerRecord.alive): its heartbeat
-- within one lease TTL of now. A record that is not a JSON object is nobody's: skipped.
-- Called only by a call that uses one of those features, never on a plain path. A record
-- that says '"level":' then a digit from 2 to 9 (as worker_record writes it, 3 from 0.3.0,
-- 2 before; JSON escapes any quote inside a string, so no value can hold those characters)
-- is not decoded. Level 3 adds nothing refused to a level-2 worker (records.CURRENT_LEVEL).
-- A check that finds none sets K_LEVELS for LEVELS_MS: the calls of the next second skip
-- it (a grouped enqueue would otherwise read every worker record each time). A 0.1.x
-- worker that registers within that second is found by the first check after it.
local LEVELS_MS = 1000
local function older_worker(now)
  if redis.call('EXISTS', K_LEVELS) == 1 then return nil end
  local live_from = now - cfg_num('lease_ttl_s') * 1000
  local flat = redis.call('HGETALL', K_WORKERS)
  for i = 1, #flat, 2 do
    local raw = flat[i + 1]
    if not string.find(raw, '"level":[2-9]') then
      local ok, w = pcall(cjson.decode, raw)
      if ok and type(w) == 'table' and (tonumber(w.level) or 1) < 2
        and (tonumber(w.heartbeat_ms) or -math.huge) >= live_from then
        return flat[i]
      end
    end
  end
  redis.call('SET', K_LEVELS, '1', 'PX', LEVELS_MS)
  return nil
end

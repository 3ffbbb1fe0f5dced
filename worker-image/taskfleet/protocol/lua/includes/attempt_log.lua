-- The attempt that just ended, kept in the task's history (field 'history': a JSON array,
-- oldest first, at most 16 records; the oldest dropped). Called when an attempt ends any
-- way but done: a done attempt is told by the task's own fields (pod, started_at,
-- finished_at), so the common path writes nothing. Record: attempt, pod, started_at,
-- ended_at (epoch ms), outcome, and error and traceback when there are (the traceback's
-- last 4096 bytes). Call it before the fields it reads change (attempts, pod, started_at).
local function attempt_log(key, outcome, now, err, tb)
  local v = redis.call('HMGET', key, 'history', 'attempts', 'pod', 'started_at')
  local list = {}
  if v[1] then
    local ok, got = pcall(cjson.decode, v[1])
    if ok and type(got) == 'table' then list = got end
  end
  if tb and #tb > 4096 then tb = string.sub(tb, -4096) end
  if err == '' then err = nil end
  if tb == '' then tb = nil end
  list[#list + 1] = {attempt = tonumber(v[2]) or 0, pod = v[3], started_at = tonumber(v[4]),
    ended_at = now, outcome = outcome, error = err, traceback = tb}
  while #list > 16 do table.remove(list, 1) end
  redis.call('HSET', key, 'history', cjson.encode(list))
end

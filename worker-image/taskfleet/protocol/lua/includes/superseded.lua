-- superseded: why this incarnation may not work under the name, else nil: the name's
-- worker record when another incarnation registered under it since (this process was
-- replaced: a call from it must get nothing), or, for a caller that registered
-- (`registered`), '' when the name has no readable record (it was deregistered by a
-- successor, requeued, swept, or lost with the data: the caller registers again before
-- it works on). The incarnation field as worker_record writes it is looked for in the
-- record's text first (a quote in a JSON string is escaped, so it cannot match there);
-- only a record without it is decoded. Second value: the name's record, when it is this
-- incarnation's (claim_tasks reads which claim record form it takes there).
local function superseded(pod, incarnation, registered)
  local rec = redis.call('HGET', K_WORKERS, pod)
  if rec then
    if string.find(rec, '"incarnation":"' .. incarnation .. '"', 1, true) then return nil, rec end
    local ok, w = pcall(cjson.decode, rec)
    if ok and type(w) == 'table' and w.incarnation ~= nil then
      if w.incarnation == incarnation then return nil, rec end
      return rec
    end
  end
  if registered then return '' end
  return nil
end

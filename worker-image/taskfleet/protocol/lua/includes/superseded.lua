--- @include "other_holder"
-- superseded: the name's worker record when another incarnation than `incarnation`
-- registered under it since (this process was replaced: a claim from it must get
-- nothing), else nil. The incarnation field as worker_record writes it is looked for in
-- the record's text first (a quote in a JSON string is escaped, so it cannot match
-- there); only a record without it is decoded (other_holder: an unreadable record, or
-- none, is nobody's).
local function superseded(pod, incarnation)
  local rec = redis.call('HGET', K_WORKERS, pod)
  if not rec or string.find(rec, '"incarnation":"' .. incarnation .. '"', 1, true) then
    return nil
  end
  return other_holder(pod, incarnation)
end

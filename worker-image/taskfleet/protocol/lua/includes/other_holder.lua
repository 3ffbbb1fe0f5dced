-- The pod's worker record if another incarnation than `incarnation` holds it (an
-- unreadable record counts as nobody's), else nil.
local function other_holder(pod, incarnation)
  local rec = redis.call('HGET', K_WORKERS, pod)
  if not rec then return nil end
  local ok, w = pcall(cjson.decode, rec)
  if not ok or type(w) ~= 'table' or w.incarnation == nil or w.incarnation == incarnation then
    return nil
  end
  return rec, w.incarnation
end


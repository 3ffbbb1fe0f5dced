-- Finished tasks (a done, dead or cancelled zset) matching a filter, for retry and purge:
-- ids with finished_at in [lo, hi] (ms) and, if reason ~= '', that reason. Walks the zset
-- from `offset` (the entries skipped by earlier calls: those that matched left the set),
-- at most `bound` entries. Returns the matching ids and the offset to go on from, or -1
-- when the range is exhausted.
local function finished_matching(zkey, reason, lo, hi, offset, bound)
  local ids = redis.call('ZRANGEBYSCORE', zkey, lo, hi, 'LIMIT', offset, bound)
  local matching = {}
  for _, id in ipairs(ids) do
    if reason == '' or redis.call('HGET', K_TASK .. id, 'reason') == reason then
      matching[#matching + 1] = id
    else
      offset = offset + 1
    end
  end
  if #ids < bound then offset = -1 end
  return matching, offset
end


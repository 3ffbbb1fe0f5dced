-- drop: delete finished tasks of one state (done, dead or cancelled), by id or by filter;
-- what retention would do later, now. Tasks in any other state are never touched.
-- Arguments: ARG_* and RECORD(i) (signatures.Drop, one TaskId per id): state 'done' |
--   'dead' | 'cancelled'; mode 'ids' (the records: those in another state are skipped)
--   or 'scan' (reason '' = any, oldest_ms '-inf' or ms, newest_ms, offset, bound: see
--   finished_matching).
-- Returns: {how many were deleted, the offset to go on from (-1: done)}
--- @include "chosen_finished"
local state = ARG_STATE
local zkey = ({done = K_DONE, dead = K_DEAD, cancelled = K_CANCELLED})[state]
if not zkey then return redis.error_reply('drop: not a finished state: ' .. tostring(state)) end
local ids, offset = chosen_finished(zkey, ARG_MODE, tonumber(ARG_N), RECORD, ARG_REASON,
  ARG_OLDEST_MS, ARG_NEWEST_MS, tonumber(ARG_OFFSET), tonumber(ARG_BOUND))
local n = 0
for _, id in ipairs(ids) do
  local key = K_TASK .. id
  if redis.call('HGET', key, 'state') == state then
    redis.call('ZREM', zkey, id)
    redis.call('DEL', key)
    n = n + 1
  end
end
return {n, offset}

-- drop: delete finished tasks of one state (done, dead or cancelled), by id or by filter;
-- what retention would do later, now. Tasks in any other state are never touched.
-- KEYS[1..19]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_DONE, K_DEAD,
--   K_CANCELLED.
-- ARGV[1] state: 'done' | 'dead' | 'cancelled'
-- ARGV[2] mode: 'ids', then ARGV[3..] task ids (those in another state are skipped); or
--   'scan', then ARGV[3] reason ('' = any), ARGV[4] oldest finished_at (ms, '-inf'),
--   ARGV[5] newest finished_at (ms), ARGV[6] offset, ARGV[7] bound
-- Returns: {how many were deleted, the offset to go on from (-1: done)}
--- @include "chosen_finished"
local state = ARGV[1]
local zkey = ({done = K_DONE, dead = K_DEAD, cancelled = K_CANCELLED})[state]
if not zkey then return redis.error_reply('drop: not a finished state: ' .. tostring(state)) end
local ids, offset = chosen_finished(zkey)
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

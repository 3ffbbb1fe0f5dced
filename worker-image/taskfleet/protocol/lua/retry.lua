-- retry: dead tasks run again, with a new attempt budget ("replay"): each goes back to
-- pending (behind what waits at its priority) with attempts, losses and deferrals at 0,
-- its error, reason, result and start deadline dropped.
-- KEYS[1..19]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_DEAD,
--   K_PENDING, K_SEQ, K_STATS, K_NOTIFY, K_DEMAND.
-- ARGV[1] max_attempts for the new budget ('' = keep the task's own, or the queue's)
-- ARGV[2] mode: 'ids', then ARGV[3..] task ids (those not dead are skipped); or 'scan',
--   then ARGV[3] reason ('' = any), ARGV[4] oldest finished_at (ms, '-inf'), ARGV[5]
--   newest finished_at (ms), ARGV[6] offset, ARGV[7] bound (see finished_matching)
-- Returns: {how many went back to pending, the offset to go on from (-1: done)}
--- @include "now_ms"
--- @include "bump"
--- @include "flush_counts"
--- @include "notify"
--- @include "to_pending"
--- @include "chosen_finished"
local now = now_ms()
local max_attempts = ARGV[1]
local ids, offset = chosen_finished(K_DEAD)
local n = 0
for _, id in ipairs(ids) do
  local key = K_TASK .. id
  if redis.call('HGET', key, 'state') == 'dead' then
    redis.call('ZREM', K_DEAD, id)
    redis.call('HDEL', key, 'reason', 'error', 'result', 'finished_at', 'token', 'deadline',
      'deferred', 'cancel_requested', 'cost_used', 'progress', 'progress_at')
    redis.call('HSET', key, 'attempts', 0, 'lost', 0, 'run_at', now)
    if max_attempts ~= '' then redis.call('HSET', key, 'max_attempts', max_attempts) end
    to_pending(id, key, false)
    n = n + 1
  end
end
bump('replayed', n)
notify(n)
flush_counts()
return {n, offset}

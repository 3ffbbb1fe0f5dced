-- retry: dead tasks run again, with a new attempt budget ("replay"): each goes back to
-- pending (behind what waits at its priority) with attempts, losses and deferrals at 0,
-- its error, reason, result and start deadline dropped. One that waits on others (field
-- 'after') waits again for those not done, or ends again by its policy; a parent waits
-- so for the children its run added, then runs again.
-- Arguments: ARG_* and RECORD(i) (signatures.Retry, one TaskId per id): max_attempts for
--   the new budget ('' = keep the task's own, or the queue's); mode 'ids' (the records:
--   those not dead are skipped), 'flow' (the records: dead or cancelled ones go back, the
--   others are skipped; a flow's retry names its members dependencies first) or 'scan'
--   (reason '' = any, oldest_ms '-inf' or ms, newest_ms, offset, bound: see
--   finished_matching).
-- Returns: {how many went back to pending, the offset to go on from (-1: done)}
--- @include "event"
--- @include "now_ms"
--- @include "bump"
--- @include "flush_counts"
--- @include "notify"
--- @include "to_pending"
--- @include "flow_hold"
--- @include "flow_reopen"
--- @include "chosen_finished"
local now = now_ms()
local max_attempts = ARG_MAX_ATTEMPTS
local ids, offset = chosen_finished(K_DEAD, ARG_MODE, tonumber(ARG_N), RECORD, ARG_REASON,
  ARG_OLDEST_MS, ARG_NEWEST_MS, tonumber(ARG_OFFSET), tonumber(ARG_BOUND))
local n = 0
local flow = ARG_MODE == 'flow'
for _, id in ipairs(ids) do
  local key = K_TASK .. id
  local state = redis.call('HGET', key, 'state')
  if state == 'dead' or (flow and state == 'cancelled') then
    redis.call('ZREM', state == 'dead' and K_DEAD or K_CANCELLED, id)
    redis.call('HDEL', key, 'reason', 'error', 'result', 'finished_at', 'token', 'deadline',
      'deferred', 'cancel_requested', 'cost_used', 'progress', 'progress_at', 'in_bytes',
      'dep_failed')
    redis.call('HSET', key, 'attempts', 0, 'lost', 0, 'run_at', now)
    if max_attempts ~= '' then redis.call('HSET', key, 'max_attempts', max_attempts) end
    to_pending(id, key, false)
    event('requeued', id)
    local after = redis.call('HMGET', key, 'after', 'on_dep_fail', 'flow', 'join')
    -- a flow's member: open again, and its flow if it had ended (flow_reopen)
    if after[3] then flow_reopen(after[3], key, state, now) end
    -- a parent that added children at run time (join) runs its handler again: it waits
    -- for the children still out as for any dependency and then goes pending, rather
    -- than end done by their ends alone (flow_join_done); its new run adds them again
    -- (ended ones are not waited for) and joins what it adds anew
    if after[4] then redis.call('HDEL', key, 'join', 'deps_left') end
    -- a task that waits on others waits again for those not done (or ends by its policy)
    if after[1] then flow_hold(now, id, key, after[1], after[2]) end
    n = n + 1
  end
end
bump('replayed', n)
notify(n)
flush_counts()
return {n, offset}

--- @include "event"
--- @include "now_ms"
--- @include "bump"
--- @include "to_pending"
--- @include "to_cancelled"
--- @include "leave_running"
--- @include "attempt_log"
--- @include "pq_refund"
-- Graceful give-back: front of its priority, the start is not counted as an attempt; a
-- task whose cancellation was asked for ends cancelled instead (returns false then).
-- What its claim reserved of provider quotas goes back (pq_refund). `unstarted`: no
-- handler began the run (a hand-off, a prefetch): no 'released' record in its history.
local function release_task(id, key, pod, unstarted)
  local now = now_ms()
  pq_refund(key, now)
  leave_running(id, key, pod)
  if redis.call('HEXISTS', key, 'cancel_requested') == 1 then
    attempt_log(key, 'cancelled', now)
    to_cancelled(id, key, now)
    return false
  end
  if not unstarted then attempt_log(key, 'released', now) end
  redis.call('HINCRBY', key, 'attempts', -1)
  to_pending(id, key, true)
  event('requeued', id)
  bump('released')
  return true
end


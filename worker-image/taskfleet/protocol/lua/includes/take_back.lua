--- @include "event"
--- @include "cfg_num"
--- @include "bump"
--- @include "to_pending"
--- @include "to_dead"
--- @include "to_cancelled"
--- @include "leave_running"
--- @include "attempt_log"
-- A running task whose worker is gone (lease expired, pod deleted, new incarnation):
-- back to the front of pending, or dead with reason "worker lost" once lost more than
-- max_lost times (on loss max_lost + 1),
-- so a task that kills its worker cannot crash-loop the fleet. Returns 'pending'|'dead', or
-- 'cancelled' when its cancellation was asked for while it ran.
local function take_back(id, key, pod, now)
  leave_running(id, key, pod)
  attempt_log(key, 'lost', now)
  event('lost', id)
  if redis.call('HEXISTS', key, 'cancel_requested') == 1 then
    to_cancelled(id, key, now)  -- its cancellation was asked for: it does not run again
    return 'cancelled'
  end
  local lost = redis.call('HINCRBY', key, 'lost', 1)
  bump('lost')
  if lost > cfg_num('max_lost') then
    to_dead(id, key, now, 'worker lost', 'its worker was lost ' .. lost .. ' times')
    return 'dead'
  end
  to_pending(id, key, true)
  event('requeued', id)
  bump('requeued')
  return 'pending'
end


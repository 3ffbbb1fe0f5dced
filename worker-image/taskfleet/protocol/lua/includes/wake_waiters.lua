-- Producers waiting on a task (Queue.wait) list their waiter ids in its 'waiters' field
-- (watch.lua). When the task finishes, its id goes onto each waiter's list, which lives a
-- minute after the last push (a waiter that left leaves nothing behind for long). A task
-- nobody waits on costs nothing: the field is absent.
local WAITER_TTL_MS = 60000
local function wake_waiters(id, key, waiters)
  if not waiters then return end
  for w in string.gmatch(waiters, '[^ ]+') do
    redis.call('LPUSH', K_WAITER .. w, id)
    redis.call('PEXPIRE', K_WAITER .. w, WAITER_TTL_MS)
  end
  redis.call('HDEL', key, 'waiters')
end


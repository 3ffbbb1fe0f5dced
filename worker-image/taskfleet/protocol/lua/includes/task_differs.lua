--- @include "same_value"
--- @include "same_after"
-- What differs between the existing task at key and an enqueue of the same id: nil when
-- it is the same task (the enqueue is then a no-op), else the first field that differs.
-- delay and deadline are relative to each call and not compared; max_attempts only when
-- the enqueue gives one (the stored value is the queue default of the first enqueue);
-- after and on_dep_fail as same_after says.
local function task_differs(key, payload, priority, max_attempts, cost, timeout, after,
                            on_dep_fail)
  local v = redis.call('HMGET', key, 'payload', 'priority', 'cost', 'timeout', 'max_attempts')
  if v[1] ~= payload then
    -- a named task's payload starts with its name between \1 bytes (tasknames.py)
    local pattern = '^\1([^\1]*)\1'
    if string.match(v[1] or '', pattern) ~= string.match(payload, pattern) then return 'name' end
    return 'payload'
  end
  if not same_value(v[2], priority) then return 'priority' end
  if not same_value(v[3], cost) then return 'cost' end
  if not same_value(v[4], timeout) then return 'timeout' end
  if max_attempts ~= '' and not same_value(v[5], max_attempts) then return 'max_attempts' end
  return same_after(key, after, on_dep_fail)
end

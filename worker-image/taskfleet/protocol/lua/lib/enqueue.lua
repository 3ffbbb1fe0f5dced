-- create_task: store one new task (its key must not exist) and index it.
--   deadline: '' (none), '<ms>' relative to now, or '@<ms>' absolute epoch ms.
--   max_attempts / timeout: '' = the queue's config at the time it matters.
--   trace: nil or '' (none), or the producer's trace context, stored as is.
-- Returns whether it went straight to pending (for wake-ups).
local function create_task(now, key, id, payload, priority, delay_ms, deadline, max_attempts, cost,
                           timeout, trace)
  if max_attempts == '' then max_attempts = cfg('max_attempts') end
  delay_ms = tonumber(delay_ms) or 0
  local fields = {
    'id', id, 'payload', payload, 'priority', priority, 'attempts', 0,
    'max_attempts', max_attempts, 'lost', 0, 'created_at', now, 'cost', cost,
  }
  if timeout ~= '' then
    fields[#fields + 1] = 'timeout'
    fields[#fields + 1] = timeout
  end
  if trace and trace ~= '' then
    fields[#fields + 1] = 'trace'
    fields[#fields + 1] = trace
  end
  if deadline ~= '' then
    local at
    if string.sub(deadline, 1, 1) == '@' then
      at = tonumber(string.sub(deadline, 2))
    else
      at = now + tonumber(deadline)
    end
    fields[#fields + 1] = 'deadline'
    fields[#fields + 1] = at
    redis.call('ZADD', K_DEADLINES, at, id)
  end
  local immediate = delay_ms <= 0
  local run_at = now
  if immediate then
    fields[#fields + 1] = 'state'
    fields[#fields + 1] = 'pending'
    redis.call('ZADD', K_PENDING, pending_score(tonumber(priority), false), id)
  else
    run_at = now + delay_ms
    fields[#fields + 1] = 'state'
    fields[#fields + 1] = 'delayed'
    redis.call('ZADD', K_DELAYED, run_at, id)
  end
  fields[#fields + 1] = 'run_at'
  fields[#fields + 1] = run_at
  redis.call('HSET', key, unpack(fields))
  bump('enqueued')
  return immediate
end

-- enqueue_task: create one task unless its id exists (fire_schedule.lua: a slot's task).
-- Returns 1 if created, 0 if a task with this id exists (nothing changed), and whether
-- it went straight to pending.
local function enqueue_task(now, id, payload, priority, delay_ms, deadline, max_attempts, cost,
                            timeout)
  local key = K_TASK .. id
  if redis.call('EXISTS', key) == 1 then return 0, false end
  return 1, create_task(now, key, id, payload, priority, delay_ms, deadline, max_attempts, cost,
    timeout)
end

-- Two stored values are the same when their texts are, or both are the same number (a
-- foreign writer may have stored '5.0' for 5); absent and '' are the same.
local function same_value(stored, given)
  if stored == false or stored == nil then stored = '' end
  if stored == given then return true end
  local a, b = tonumber(stored), tonumber(given)
  return a ~= nil and a == b
end

-- What differs between the existing task at key and an enqueue of the same id: nil when
-- it is the same task (the enqueue is then a no-op), else the first field that differs.
-- delay and deadline are relative to each call and not compared; max_attempts only when
-- the enqueue gives one (the stored value is the queue default of the first enqueue).
local function task_differs(key, payload, priority, max_attempts, cost, timeout)
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
  return nil
end

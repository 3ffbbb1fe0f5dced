--- @include "event"
--- @include "cfg"
--- @include "bump"
--- @include "pending_score"
--- @include-lazy "deadline_run"
-- create_task: store one new task (its key must not exist) and index it.
--   deadline: '' (none), '<ms>' relative to now, or '@<ms>' absolute epoch ms.
--   max_attempts / timeout: '' = the queue's config at the time it matters.
--   trace: nil or '' (none), or the producer's trace context, stored as is.
--   group: nil or '' (none), or the group it belongs to (fair claiming, group_fair.lua).
-- Returns whether it went straight to pending (for wake-ups), and for a grouped task that
-- did its pending score: the caller adds it (pending_add), so that a script of plain tasks
-- carries no group code and is given no group key.
local function create_task(now, key, id, payload, priority, delay_ms, deadline, max_attempts, cost,
                           timeout, trace, group)
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
  local grouped = group and group ~= ''
  if grouped then
    fields[#fields + 1] = 'group'
    fields[#fields + 1] = group
  end
  local at, placed
  if deadline ~= '' then
    if string.sub(deadline, 1, 1) == '@' then
      at = tonumber(string.sub(deadline, 2))
    else
      at = now + tonumber(deadline)
    end
    fields[#fields + 1] = 'deadline'
    fields[#fields + 1] = at
    redis.call('ZADD', K_DEADLINES, at, id)
  end
  event('enqueued', id)
  local immediate = delay_ms <= 0
  local run_at = now
  if immediate then
    fields[#fields + 1] = 'state'
    fields[#fields + 1] = 'pending'
    local score = pending_score(tonumber(priority), false)
    if grouped then
      placed = score
    else
      redis.call('ZADD', K_PENDING, score, id)
      -- runs of deadlines describe K_PENDING only; a group's zset has none
      if at then deadline_run(score, at) end
    end
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
  return immediate, placed
end


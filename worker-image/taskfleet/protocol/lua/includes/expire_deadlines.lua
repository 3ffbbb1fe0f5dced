--- @include "event"
--- @include "bump"
--- @include "call_chunked"
--- @include "wake_waiters"
--- @include "flow_finished"
--- @include "pending_remove"
-- Tasks not started by their deadline -> dead, reason "expired": up to `limit` of them,
-- earliest deadline first, as to_dead ends a task but in two commands per task (its state
-- and waiters read, its record written) and the indexes in one command per call. A task
-- whose hash is gone leaves every index it was in. Returns how many died and whether more
-- deadlines have passed (a backlog: the caller says so, and is called again).
-- Bounded in time too: past EXPIRE_BUDGET_US since it began (looked at every
-- EXPIRE_CHECK tasks), it stops. A call the kernel preempted (a busy machine) then ends
-- soon after it runs again, not a whole slice later; on a quiet one `limit` comes first.
local EXPIRE_BUDGET_US = 1000
local EXPIRE_CHECK = 10
local function expire_deadlines(now, limit)
  local ids = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', '(' .. now, 'LIMIT', 0, limit)
  if #ids == 0 then return 0, false end
  local t = redis.call('TIME')
  local began = tonumber(t[1]) * 1000000 + tonumber(t[2])
  local pending, delayed, dead = {}, {}, {}
  local done = #ids
  for i, id in ipairs(ids) do
    if i > EXPIRE_CHECK and i % EXPIRE_CHECK == 1 then
      t = redis.call('TIME')
      if tonumber(t[1]) * 1000000 + tonumber(t[2]) - began > EXPIRE_BUDGET_US then
        done = i - 1
        break
      end
    end
    local key = K_TASK .. id
    local v = redis.call('HMGET', key, 'state', 'waiters', 'dependants', 'group', 'flow')
    local state = v[1]
    if state == 'pending' or state == 'delayed' or state == 'waiting' then
      if state == 'delayed' then
        delayed[#delayed + 1] = id
      elseif state == 'waiting' then
        redis.call('ZREM', K_WAITING, id)
      elseif v[4] and v[4] ~= '' then
        pending_remove(id, v[4])  -- a group's: from its own zset
      else
        pending[#pending + 1] = id
      end
      dead[#dead + 1] = now
      dead[#dead + 1] = id
      redis.call('HSET', key, 'state', 'dead', 'reason', 'expired', 'finished_at', now,
        'error', 'not started before its deadline')
      event('dead', id)
      wake_waiters(id, key, v[2])
      flow_finished(id, 'x', v[3], nil, v[5])
    elseif not state then
      pending[#pending + 1] = id
      delayed[#delayed + 1] = id
    end
  end
  redis.call('ZREMRANGEBYRANK', K_DEADLINES, 0, done - 1)  -- exactly these: the lowest ranks
  call_chunked('ZREM', K_PENDING, pending)
  call_chunked('ZREM', K_DELAYED, delayed)
  call_chunked('ZADD', K_DEAD, dead)
  local n = #dead / 2
  if n > 0 then
    bump('expired', n)
    bump('dead_total', n)
  end
  if #pending > 0 then
    -- the runs (deadline_run.lua) wholly below pending's head hold nothing any more
    local head = redis.call('ZRANGE', K_PENDING, 0, 0, 'WITHSCORES')
    if #head > 0 then
      redis.call('ZREMRANGEBYSCORE', K_DEADLINE_RUNS, '-inf', '(' .. head[2])
    else
      redis.call('DEL', K_DEADLINE_RUNS)
    end
  end
  local more = done < #ids or (#ids == limit
    and #redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', '(' .. now, 'LIMIT', 0, 1) > 0)
  return n, more
end

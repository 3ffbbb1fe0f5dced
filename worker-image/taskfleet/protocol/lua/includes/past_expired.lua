-- past_expired: where a claim's walk of pending may go on after `id`, a task at its head
-- whose deadline passed: the score of the last expired task of the run (deadline_run.lua)
-- that holds it, or nil when no run holds it (the claim then expires it itself). Deadlines
-- never decrease within a run, so its expired tasks come first and the last one is found
-- by halving: at most 8 + 2 log2(n) commands for a run of n, whatever part of it expired.
-- Nothing is changed: expire_deadlines clears those tasks, earliest deadline first.
local function past_expired(id, now)
  local d = redis.call('ZSCORE', K_DEADLINES, id)
  if not d or tonumber(d) >= now then return nil end
  local p = redis.call('ZSCORE', K_PENDING, id)
  local run = redis.call('ZRANGEBYSCORE', K_DEADLINE_RUNS, p, '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if #run == 0 or tonumber(string.match(run[1], '^[^:]+')) > tonumber(p) then return nil end
  local function expired(rank)
    local at = redis.call('ZRANGE', K_PENDING, rank, rank)[1]
    local deadline = at and redis.call('ZSCORE', K_DEADLINES, at)
    return deadline and tonumber(deadline) < now
  end
  -- ranks first..last are the run's tasks from id on; first is expired
  local first = redis.call('ZRANK', K_PENDING, id)
  local last = redis.call('ZCOUNT', K_PENDING, '-inf', run[2]) - 1
  if expired(last) then return run[2] end
  while last - first > 1 do
    local mid = math.floor((first + last) / 2)
    if expired(mid) then first = mid else last = mid end
  end
  return redis.call('ZRANGE', K_PENDING, first, first, 'WITHSCORES')[2]
end

-- deadline_run: a new task with a start deadline `deadline` joined pending at `score` (the
-- highest FIFO score of its priority so far): note it in deadline_runs, so a claim can step
-- over the expired part of a stretch of such tasks at once (past_expired.lua) instead of
-- one task at a time.
-- A run is one entry of deadline_runs: member '<lo>:<last deadline>', score hi. Every task
-- in pending with a score in [lo, hi] is a never-started task of one priority with a start
-- deadline, and their deadlines never decrease as the score grows. That stays true until
-- the run's tasks are gone: new entries of a priority go above all of its FIFO scores, or
-- below them (front), never between two; removals keep the order. So a task joins the run
-- below it when both are of one priority, nothing is pending between them (its score is the
-- next one, or ZCOUNT says so) and its deadline is not earlier than the run's last.
-- The runs wholly below pending's head hold nothing: they go when a run is made.
local RUN_BAND = 1e12  -- pending_score's BAND: the width of one priority's scores
local function deadline_run(score, deadline)
  local at = string.format('%.17g', score)
  local below = redis.call('ZREVRANGEBYSCORE', K_DEADLINE_RUNS, '(' .. at, '-inf', 'WITHSCORES',
    'LIMIT', 0, 1)
  if #below > 0 then
    local hi = tonumber(below[2])
    local cut = string.find(below[1], ':', 1, true)
    local last = tonumber(string.sub(below[1], cut + 1))
    if deadline >= last and math.floor(hi / RUN_BAND) == math.floor(score / RUN_BAND)
        and (score - hi == 1
          or redis.call('ZCOUNT', K_PENDING, '(' .. below[2], '(' .. at) == 0) then
      if deadline ~= last then redis.call('ZREM', K_DEADLINE_RUNS, below[1]) end
      redis.call('ZADD', K_DEADLINE_RUNS, score,
        string.sub(below[1], 1, cut) .. string.format('%.17g', deadline))
      return
    end
  end
  local head = redis.call('ZRANGE', K_PENDING, 0, 0, 'WITHSCORES')
  if #head > 0 then redis.call('ZREMRANGEBYSCORE', K_DEADLINE_RUNS, '-inf', '(' .. head[2]) end
  redis.call('ZADD', K_DEADLINE_RUNS, score, at .. ':' .. string.format('%.17g', deadline))
end

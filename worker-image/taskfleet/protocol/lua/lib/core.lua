-- core: server time, the queue's config, statistics counters and task-state moves that
-- every script shares. scripts.py prepends this (after a generated prelude that binds
-- K_<NAME> = KEYS[n] in keys.SCRIPT_KEYS order and DEFAULTS from config.QueueConfig).
--
-- Task states: pending | delayed | running | done | dead | cancelled. A task id is in
-- exactly one of the zsets pending/delayed/running/done/dead/cancelled; a running task is
-- also in pod:<pod>. A running task whose cancellation was asked for carries the field
-- 'cancel_requested' (ms): wherever it leaves running, it ends cancelled (to_cancelled).

-- Server time in ms: every pod agrees on it whatever its own clock says.
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local CONFIG = nil
local function cfg(name)
  if CONFIG == nil then
    CONFIG = {}
    local flat = redis.call('HGETALL', K_CONFIG)
    for i = 1, #flat, 2 do CONFIG[flat[i]] = flat[i + 1] end
  end
  local v = CONFIG[name]
  if v == nil or v == '' then v = DEFAULTS[name] end
  return v
end

-- A config number, or fallback when it is absent, not a number or not finite: a nan or
-- inf written by a foreign client must not break every claim of the fleet.
local function cfg_num(name, fallback)
  local v = tonumber(cfg(name))
  if v == nil or v ~= v or v == math.huge or v == -math.huge then return fallback end
  return v
end

-- redis.call(cmd, key, unpack(args)) for a list built up by a batch, in chunks (unpack
-- has a stack limit); an even chunk size keeps ZADD's score-member pairs together.
local function call_chunked(cmd, key, args)
  for i = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
  end
end

-- A claim record that hand_off (claim.lua) pushed onto a wake list: its task's id and key,
-- and whether that incarnation still holds the task under the record's token (a task
-- taken back meanwhile is not its any more).
local function handed_task(rec, incarnation)
  local id, token = string.match(rec, '^(%Z*)%z(%Z*)%z')
  local key = K_TASK .. (id or '')
  local v = redis.call('HMGET', key, 'state', 'token', 'incarnation')
  return id, key, v[1] == 'running' and v[2] == token and v[3] == incarnation
end

-- The pod's incarnations other than keep ('' = all) get no more tasks handed over (see
-- hand_off in claim.lua). What was handed to them is held by them, so the caller takes
-- it back itself; a kept incarnation's claims drop others' leftovers from its wake list.
local function forget_idle(pod, keep)
  local prefix = pod .. '\0'
  for _, member in ipairs(redis.call('ZRANGE', K_IDLE, 0, -1)) do
    if string.sub(member, 1, #prefix) == prefix and member ~= prefix .. keep then
      redis.call('ZREM', K_IDLE, member)
    end
  end
  if keep == '' then redis.call('DEL', K_WAKE .. pod) end
end

-- Counters are summed locally and written once per call (flush_counts) to keep batch
-- scripts cheap. Every script calls flush_counts() before it returns.
local COUNTS = {}
local function bump(field, n)
  COUNTS[field] = (COUNTS[field] or 0) + (n or 1)
end
local function flush_counts()
  for field, n in pairs(COUNTS) do
    if n ~= 0 then redis.call('HINCRBY', K_STATS, field, n) end
  end
  COUNTS = {}
end

-- pending score: higher priority first, FIFO inside a priority (enqueue sequence), and
-- "front" entries (released / taken back: they already waited) before the FIFO ones.
-- Priority is bounded to +-1000 so scores stay exact doubles.
local BAND = 1e12
local HALF = 5e11
local function pending_score(priority, front)
  local seq = redis.call('INCR', K_SEQ)
  if front then return -priority * BAND + HALF - seq end
  return -priority * BAND + HALF + seq
end

local NOTIFY_MAX = 16
-- Tell whoever watches the queue from outside (the autoscaler, the operator's sweep) that
-- it has new work: one element at most, so a burst signals once.
local function demand()
  if redis.call('LLEN', K_DEMAND) == 0 then redis.call('RPUSH', K_DEMAND, '1') end
end

-- Wake up to n idle workers blocked on BLPOP notify, and signal demand.
-- The list holds at most NOTIFY_MAX tokens: a full one (nobody blocked on it, the usual
-- case while workers are busy) costs one LLEN, not a push and a trim.
local function notify(n)
  if n <= 0 then return end
  local room = NOTIFY_MAX - redis.call('LLEN', K_NOTIFY)
  if n > room then n = room end
  if n > 0 then
    local tokens = {}
    for i = 1, n do tokens[i] = '1' end
    redis.call('LPUSH', K_NOTIFY, unpack(tokens))
  end
  demand()
end

local function to_pending(id, key, front)
  local priority = tonumber(redis.call('HGET', key, 'priority')) or 0
  redis.call('ZADD', K_PENDING, pending_score(priority, front), id)
  redis.call('HSET', key, 'state', 'pending')
end

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

local function to_dead(id, key, now, reason, err)
  redis.call('ZADD', K_DEAD, now, id)
  redis.call('ZREM', K_DEADLINES, id)
  if err ~= nil then
    redis.call('HSET', key, 'state', 'dead', 'reason', reason, 'finished_at', now, 'error', err)
  else
    redis.call('HSET', key, 'state', 'dead', 'reason', reason, 'finished_at', now)
  end
  bump('dead_total')
  wake_waiters(id, key, redis.call('HGET', key, 'waiters'))
end

-- A task ends cancelled: never to run again (kept like a dead task, dead_retention_s).
local function to_cancelled(id, key, now)
  redis.call('ZADD', K_CANCELLED, now, id)
  redis.call('ZREM', K_DEADLINES, id)
  redis.call('HSET', key, 'state', 'cancelled', 'reason', 'cancelled', 'finished_at', now)
  bump('cancelled_total')
  wake_waiters(id, key, redis.call('HGET', key, 'waiters'))
end

-- Leave running: drop the lease, keep pod/incarnation as "last ran on". keep_token: the
-- token stays on the task (an outcome written under it), so a retry of that same write
-- (its reply was lost) is told apart from a stale one; it never authorises anything
-- again, since every write checks state 'running' too.
local function leave_running(id, key, pod, keep_token)
  redis.call('ZREM', K_RUNNING, id)
  if pod then redis.call('SREM', K_POD .. pod, id) end
  if keep_token then
    redis.call('HDEL', key, 'lease_until')
  else
    redis.call('HDEL', key, 'token', 'lease_until')
  end
end

-- A running task whose worker is gone (lease expired, pod deleted, new incarnation):
-- back to the front of pending, or dead with reason "worker lost" once lost more than
-- max_lost times (on loss max_lost + 1),
-- so a task that kills its worker cannot crash-loop the fleet. Returns 'pending'|'dead', or
-- 'cancelled' when its cancellation was asked for while it ran.
local function take_back(id, key, pod, now)
  leave_running(id, key, pod)
  if redis.call('HEXISTS', key, 'cancel_requested') == 1 then
    to_cancelled(id, key, now)  -- its cancellation was asked for: it does not run again
    return 'cancelled'
  end
  local lost = redis.call('HINCRBY', key, 'lost', 1)
  bump('lost')
  if lost > cfg_num('max_lost', 3) then
    to_dead(id, key, now, 'worker lost', 'its worker was lost ' .. lost .. ' times')
    return 'dead'
  end
  to_pending(id, key, true)
  bump('requeued')
  return 'pending'
end

-- Is the task running under this claim token? Returns (holds, pod).
local function holds(key, token)
  local v = redis.call('HMGET', key, 'state', 'token', 'pod')
  return v[1] == 'running' and v[2] == token, v[3]
end

-- Delayed tasks whose run_at has come -> pending (at most limit per call).
local function promote_due(now, limit)
  local due = redis.call('ZRANGEBYSCORE', K_DELAYED, '-inf', now, 'LIMIT', 0, limit)
  for _, id in ipairs(due) do
    redis.call('ZREM', K_DELAYED, id)
    local key = K_TASK .. id
    if redis.call('EXISTS', key) == 1 then to_pending(id, key, false) end
  end
  return #due
end

-- Tasks not started by their deadline -> dead, reason "expired".
local function expire_deadlines(now, limit)
  local ids = redis.call('ZRANGEBYSCORE', K_DEADLINES, '-inf', '(' .. now, 'LIMIT', 0, limit)
  local n = 0
  for _, id in ipairs(ids) do
    redis.call('ZREM', K_DEADLINES, id)
    local key = K_TASK .. id
    local state = redis.call('HGET', key, 'state')
    if state == 'pending' or state == 'delayed' then
      redis.call('ZREM', K_PENDING, id)
      redis.call('ZREM', K_DELAYED, id)
      to_dead(id, key, now, 'expired', 'not started before its deadline')
      bump('expired')
      n = n + 1
    end
  end
  return n
end

-- Running tasks whose lease ran out: their worker stopped heartbeating. Returns
-- (taken back to pending, gone dead).
local function take_back_expired(now, limit)
  local ids = redis.call('ZRANGEBYSCORE', K_RUNNING, '-inf', '(' .. now, 'LIMIT', 0, limit)
  local requeued, dead = 0, 0
  for _, id in ipairs(ids) do
    local key = K_TASK .. id
    local pod = redis.call('HGET', key, 'pod')
    local went = take_back(id, key, pod, now)
    if went == 'dead' then dead = dead + 1 elseif went == 'pending' then requeued = requeued + 1 end
  end
  notify(requeued)
  return requeued, dead
end

-- Every task a pod holds, except those of incarnation keep (if given), is taken back.
local function requeue_pod(pod, keep, now)
  local ids = redis.call('SMEMBERS', K_POD .. pod)
  local requeued, dead = 0, 0
  for _, id in ipairs(ids) do
    local key = K_TASK .. id
    local v = redis.call('HMGET', key, 'state', 'pod', 'incarnation')
    if v[1] ~= 'running' or v[2] ~= pod then
      redis.call('SREM', K_POD .. pod, id)  -- a leftover: not held by this pod any more
    elseif keep == '' or v[3] ~= keep then
      local went = take_back(id, key, pod, now)
      if went == 'dead' then dead = dead + 1 elseif went == 'pending' then requeued = requeued + 1 end
    end
  end
  notify(requeued)
  return requeued, dead
end

-- Graceful give-back: front of its priority, the start is not counted as an attempt; a
-- task whose cancellation was asked for ends cancelled instead (returns false then).
local function release_task(id, key, pod)
  leave_running(id, key, pod)
  if redis.call('HEXISTS', key, 'cancel_requested') == 1 then
    to_cancelled(id, key, now_ms())
    return false
  end
  redis.call('HINCRBY', key, 'attempts', -1)
  to_pending(id, key, true)
  bump('released')
  return true
end

-- host: the worker's whereabouts (identity.py), opaque here; '' records none.
local function worker_record(incarnation, now, inflight, concurrency, draining, host)
  local record = {
    incarnation = incarnation,
    heartbeat_ms = now,
    inflight = tonumber(inflight) or 0,
    concurrency = tonumber(concurrency) or 0,
    draining = draining == '1',
  }
  if host ~= nil and host ~= '' then record.host = host end
  return cjson.encode(record)
end

-- The pod's worker record if another incarnation than `incarnation` holds it (an
-- unreadable record counts as nobody's), else nil.
local function other_holder(pod, incarnation)
  local rec = redis.call('HGET', K_WORKERS, pod)
  if not rec then return nil end
  local ok, w = pcall(cjson.decode, rec)
  if not ok or type(w) ~= 'table' or w.incarnation == nil or w.incarnation == incarnation then
    return nil
  end
  return rec, w.incarnation
end

-- Finished tasks (a done, dead or cancelled zset) matching a filter, for retry and purge:
-- ids with finished_at in [lo, hi] (ms) and, if reason ~= '', that reason. Walks the zset
-- from `offset` (the entries skipped by earlier calls: those that matched left the set),
-- at most `bound` entries. Returns the matching ids and the offset to go on from, or -1
-- when the range is exhausted.
local function finished_matching(zkey, reason, lo, hi, offset, bound)
  local ids = redis.call('ZRANGEBYSCORE', zkey, lo, hi, 'LIMIT', offset, bound)
  local matching = {}
  for _, id in ipairs(ids) do
    if reason == '' or redis.call('HGET', K_TASK .. id, 'reason') == reason then
      matching[#matching + 1] = id
    else
      offset = offset + 1
    end
  end
  if #ids < bound then offset = -1 end
  return matching, offset
end

-- The finished tasks a retry or purge call names (ARGV[2] onwards): 'ids', then the ids;
-- or 'scan', then reason, lo, hi, offset and bound for finished_matching over zkey.
-- Returns the ids and the offset to go on from (-1: done).
local function chosen_finished(zkey)
  if ARGV[2] == 'scan' then
    return finished_matching(zkey, ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]),
      tonumber(ARGV[7]))
  end
  local ids = {}
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
  return ids, -1
end

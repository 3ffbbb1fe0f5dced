--- @include "event"
--- @include "cfg"
--- @include "cfg_num"
--- @include "call_chunked"
--- @include "handed_task"
--- @include "bump"
--- @include "to_dead"
--- @include "promote_due"
--- @include "expire_deadlines"
--- @include "past_expired"
--- @include "take_back_expired"
--- @include "quota_budget"
--- @include "quota_wait"
--- @include "quota_take"
--- @include "quota_save"
--- @include "group_fair"
--- @include "group_pick"
--- @include "group_hold"
--- @include "group_park"
--- @include "group_took"
--- @include "group_done"
--- @include "pending_remove"
--- @include "superseded"
--- @include "pq_admit"
-- claim_tasks: hand up to `want` tasks to a worker, after the housekeeping that lets the
-- fleet run without the operator (promote due, expire deadlines, take back expired
-- leases, each at most `bound` tasks). Shared by claim.lua and complete.lua.
-- idle_ms > 0: the worker will block on its wake list if the queue runs dry; it is then
-- registered in K_IDLE until now + idle_ms, for producers to hand it a task (hand_off).
-- extra: how many of `want` are prefetch (tasks to wait in the worker for a free slot):
-- dropped under a fleet-wide concurrency limit, where a task held but not running would
-- keep a slot of the limit from a worker that could run it.
-- for_any: a hand-off, which a producer of any version makes for a worker of any version:
-- its records are tagged only when the worker's record says it reads them (claim_record 3,
-- written at register); else positional without waited_ms, the form every version reads.
-- Records: see claim.lua.
-- Returns {retry_after_ms, next_due_ms, more, task 1, task 2, ...}: see claim.lua; or
-- {-1, record} when another incarnation registered under the name since, or {-1, ''} when
-- the caller `registered` and the name has no readable record (`superseded`): nothing is
-- claimed or changed but this incarnation's idle registration, dropped.
-- Expired tasks left after this call make the reply's retry_after_ms 1 (ask again at
-- once); a run of them at the head of pending is stepped over (past_expired), so a live
-- task behind any number of them is claimed by the first claim.
-- quota_slots: the worker reserves provider quotas on their own slots (a Redis Cluster):
-- a task naming one that lies in another slot is claimed, its record carrying `quotas`
-- (docs/protocol.md 4.17); without it, such a task waits delayed for a worker that does.
local function claim_tasks(now, pod, incarnation, want, token_base, bound, idle_ms, extra, for_any,
    registered, quota_slots)
  local member = pod .. '\0' .. incarnation
  redis.call('ZREM', K_IDLE, member)
  -- a replaced process (frozen, then resumed) gets no task, nor the newcomer's hand-offs
  local holder, record = superseded(pod, incarnation, registered)
  if holder then return {-1, holder} end
  -- the worker's own claim runs its own release's script: the tagged form
  local tagged = not for_any or (record ~= nil
    and string.find(record, '"claim_record":3', 1, true) ~= nil)
  -- Tasks a producer handed over while the worker was not blocked on its wake list: they
  -- are this worker's already (unless taken back meanwhile: then they are dropped here).
  local wake = K_WAKE .. pod
  local handed = redis.call('LRANGE', wake, 0, -1)
  local kept = {}
  if #handed > 0 then
    redis.call('DEL', wake)
    for _, rec in ipairs(handed) do
      local _, _, held = handed_task(rec, incarnation)
      if held then kept[#kept + 1] = rec end
    end
    want = want - #kept
  end
  promote_due(now, bound)
  local _, backlog = expire_deadlines(now, bound)
  take_back_expired(now, bound)

  local max_conc = cfg_num('max_concurrency')
  if max_conc > 0 then
    if extra and extra > 0 then want = want - extra end
    local free = max_conc - redis.call('ZCARD', K_RUNNING)
    if free < want then want = free end
  end

  -- Token buckets: capacity = limit, refilled continuously at limit / period.
  local period_ms = cfg_num('rate_limit_period_s') * 1000
  local buckets = {}
  local function load_bucket(key, limit)
    if limit == nil or limit <= 0 then return nil end
    local v = redis.call('HMGET', key, 'tokens', 'ts')
    local tokens, ts = tonumber(v[1]), tonumber(v[2])
    if tokens == nil or ts == nil then tokens, ts = limit, now end
    local rate = limit / period_ms
    tokens = math.min(limit, tokens + math.max(0, now - ts) * rate)
    local b = {key = key, limit = limit, rate = rate, tokens = tokens}
    buckets[#buckets + 1] = b
    return b
  end
  local b_tasks = load_bucket(K_BUCKET_TASKS, cfg_num('rate_limit_tasks') or 0)
  local b_cost = load_bucket(K_BUCKET_COST, cfg_num('rate_limit_cost') or 0)
  -- the fleet-wide pause a provider's rate limit set, and the spend budget (quota_*.lua)
  local quota = quota_budget(K_QUOTA, now, cfg_num('budget_day') or 0, cfg_num('budget_month') or 0)
  if quota.till <= now and not quota.budget then quota = nil end

  local retry_after = 0
  local lease_until = now + math.floor(cfg_num('lease_ttl_s') * 1000)
  local default_timeout = cfg_num('default_timeout_s')
  default_timeout = default_timeout and tostring(default_timeout) or ''
  local out = {0, -1, 0}
  for _, rec in ipairs(kept) do out[#out + 1] = rec end
  local claimed = 0
  local blocked = false
  -- Entries dropped on the way (expired, leftovers) count against the housekeeping bound,
  -- and stretches of expired tasks stepped over (`after`: the walk goes on above that
  -- score) against one as large: a million expired tasks at the head of pending never
  -- make one long call (Redis answers nobody else while a script runs), nor keep a live
  -- task behind them waiting.
  local skipped, stepped, after = 0, 0, nil
  local pod_key = K_POD .. pod
  -- Index updates of the claimed tasks go out in one call each, not one per task.
  local running, held = {}, {}
  -- groups in use: tasks are taken one at a time in the fair order (group_fair.lua)
  local fair = group_fair(now, bound)
  local src, g, vt = K_PENDING, nil, nil

  while claimed < want and not blocked and skipped < bound do
    local ids
    if fair then
      local id
      id, src, g, vt = group_pick(fair)
      if not id then break end
      ids = {id}
    elseif after then
      ids = redis.call('ZRANGEBYSCORE', K_PENDING, '(' .. after, '+inf', 'LIMIT', 0,
        want - claimed)
    else
      ids = redis.call('ZRANGE', K_PENDING, 0, want - claimed - 1)
    end
    if #ids == 0 then break end
    local taken = {}
    for _, id in ipairs(ids) do
      local key = K_TASK .. id
      local v = redis.call('HMGET', key, 'payload', 'attempts', 'max_attempts', 'timeout', 'lost',
        'priority', 'cost', 'deadline', 'state', 'started_at', 'run_at', 'trace', 'after', 'quotas',
        'checkpoint')
      if v[9] ~= 'pending' then
        pending_remove(id, g)  -- a leftover of a deleted task: drop it
        skipped = skipped + 1
      elseif v[8] and not v[10] and tonumber(v[8]) < now then
        -- only a task that never started expires: a retried, released or taken-back one
        -- already began its work, and a drain's release must not turn it dead
        local past = not fair and backlog and stepped < bound and past_expired(id, now)
        if past then
          -- a run of them: expire_deadlines clears it, in this call and the next ones
          after = past
          stepped = stepped + 1
          break
        end
        pending_remove(id, g)
        redis.call('ZREM', K_DEADLINES, id)
        to_dead(id, key, now, 'expired', 'not started before its deadline')
        bump('expired')
        skipped = skipped + 1
      else
        -- not a usable number (a foreign writer): 1 here; the worker fails the task as
        -- unreadable when it parses the record, which carries the stored text as is
        local cost = tonumber(v[7])
        if cost == nil or cost ~= cost or cost < 0 then cost = 1 end
        -- a task costing more than a bucket holds runs when the bucket is full
        local need_cost = b_cost and math.min(cost, b_cost.limit) or 0
        if b_tasks and b_tasks.tokens < 1 then
          retry_after = math.max(retry_after, math.ceil((1 - b_tasks.tokens) / b_tasks.rate))
          blocked = true
        end
        if b_cost and b_cost.tokens < need_cost then
          retry_after = math.max(retry_after, math.ceil((need_cost - b_cost.tokens) / b_cost.rate))
          blocked = true
        end
        if quota then
          -- at most a minute: a lifted pause or a raised budget is seen by then
          local wait = math.min(quota_wait(quota, cost), 60000)
          if wait > 0 then retry_after, blocked = math.max(retry_after, wait), true end
        end
        if blocked then break end
        local hold = fair and group_hold(fair, g, cost)
        -- provider quotas (pq_admit): only a task that names some reads them; one they
        -- cannot admit now waits as a delayed task, and the claim goes on to the next
        local wait = not hold and v[14] and pq_admit(v[14], key, token_base .. ':' .. (claimed + 1), now)
        local remote = wait and wait ~= 0 and wait[1] == -1
        if remote and quota_slots and tagged then
          wait = 0
        elseif remote then
          wait[1] = PQ_MAX_WAIT_MS
        end
        if hold then
          group_park(fair, g, hold)
        elseif wait and wait ~= 0 then
          pending_remove(id, g)
          redis.call('HSET', key, 'state', 'delayed', 'run_at', now + wait[1], 'quota_wait', wait[2])
          redis.call('ZADD', K_DELAYED, now + wait[1], id)
          skipped = skipped + 1
        else
          if quota then quota_take(quota, cost) end
          if b_tasks then b_tasks.tokens = b_tasks.tokens - 1 end
          if b_cost then b_cost.tokens = b_cost.tokens - need_cost end
          claimed = claimed + 1
          local token = token_base .. ':' .. claimed
          taken[#taken + 1] = id
          if v[8] then redis.call('ZREM', K_DEADLINES, id) end
          running[#running + 1] = lease_until
          running[#running + 1] = id
          held[#held + 1] = id
          local attempts = (tonumber(v[2]) or 0) + 1
          redis.call('HSET', key, 'state', 'running', 'token', token, 'pod', pod,
            'incarnation', incarnation, 'lease_until', lease_until, 'started_at', now,
            'attempts', attempts)
          -- what it waited for as a delayed task no longer holds it (only a task naming quotas)
          if v[14] then redis.call('HDEL', key, 'quota_wait') end
          event('started', id, attempts)
          local fields
          if tagged then
            -- name, value pairs (no value empty: an absent one is left out), then an
            -- empty name and the payload, which may hold anything
            -- (lost 0, priority 0 and cost 1, the defaults, are left out too)
            fields = {'\1' .. '3', 'id', id, 'token', token, 'attempts', attempts,
              'max_attempts', v[3] or cfg('max_attempts')}
            local n = 9
            if v[5] and v[5] ~= '0' then fields[n + 1], fields[n + 2], n = 'lost', v[5], n + 2 end
            if v[6] and v[6] ~= '0' then fields[n + 1], fields[n + 2], n = 'priority', v[6], n + 2 end
            if v[7] and v[7] ~= '1' then fields[n + 1], fields[n + 2], n = 'cost', v[7], n + 2 end
            local timeout = v[4] or default_timeout
            if timeout ~= '' then fields[n + 1], fields[n + 2], n = 'timeout', timeout, n + 2 end
            -- waited: ms from when the task was ready (enqueued, due, or retried) to now
            local ready_at = tonumber(v[11])
            if ready_at then
              fields[n + 1], fields[n + 2], n = 'waited_ms', math.max(0, now - ready_at), n + 2
            end
            if v[8] then fields[n + 1], fields[n + 2], n = 'deadline', v[8], n + 2 end
            if g and g ~= '' then fields[n + 1], fields[n + 2], n = 'group', g, n + 2 end
            if v[12] and v[12] ~= '' then fields[n + 1], fields[n + 2], n = 'trace', v[12], n + 2 end
            if v[13] and v[13] ~= '' then fields[n + 1], fields[n + 2], n = 'after', v[13], n + 2 end
            -- the state an earlier attempt stored (checkpoint.lua): never empty, never NUL
            if v[15] and v[15] ~= '' then fields[n + 1], fields[n + 2], n = 'checkpoint', v[15], n + 2 end
            -- the estimate the worker reserves on the quotas' own slots (a cluster)
            if remote then fields[n + 1], fields[n + 2], n = 'quotas', v[14], n + 2 end
            fields[n + 1], fields[n + 2] = '', v[1] or ''
          else
            fields = {id, token, attempts, v[3] or cfg('max_attempts'),
              v[4] or default_timeout, v[5] or 0, v[6] or 0, v[7] or 1, v[1] or ''}
          end
          out[#out + 1] = table.concat(fields, '\0')
          if fair then group_took(fair, g, vt, src, id, cost, v[14]) end
        end
      end
    end
    -- before the next ZRANGE, which must not see this round's tasks again
    if not fair then call_chunked('ZREM', K_PENDING, taken) end
  end
  call_chunked('ZADD', K_RUNNING, running)
  call_chunked('SADD', pod_key, held)

  for _, b in ipairs(buckets) do
    redis.call('HSET', b.key, 'tokens', tostring(b.tokens), 'ts', now)
  end
  if quota then quota_save(quota) end

  local first = redis.call('ZRANGE', K_DELAYED, 0, 0, 'WITHSCORES')
  if #first > 0 then out[2] = math.max(0, tonumber(first[2]) - now) end
  -- expired tasks left to clear: ask again at once (and not as an idle worker)
  if backlog and retry_after == 0 then retry_after = 1 end
  if fair then
    local parked = group_done(fair)
    if parked and claimed < want and (retry_after == 0 or parked < retry_after) then
      retry_after = parked
    end
  end
  out[1] = retry_after
  if redis.call('ZCARD', K_PENDING) > 0 or (fair and redis.call('EXISTS', K_GROUPS) == 1) then
    out[3] = 1
  elseif retry_after == 0 and idle_ms and idle_ms > 0 and claimed < want then
    -- it got fewer than it has room for and will wait: at most one hand-off comes, so a
    -- worker never holds more than its free slots
    redis.call('ZADD', K_IDLE, now + idle_ms, member)
  end
  return out
end


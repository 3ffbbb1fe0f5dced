-- complete: finish tasks with their results (a batch is one round trip).
-- Arguments: ARG_* and RECORD(i) (signatures.Complete, one Completion per task): task id,
--   claim token, result JSON ('' = none); with ARG_POD not '', a claim for the slots this
--   frees follows in the same call (saves the worker a round trip), as claim.lua takes it.
-- Returns: a string of N characters, one per task: '1' = completed; '2' = the result is
--   larger than max_payload_bytes: the task is dead (reason 'result too large') with the
--   sizes in its error, no retry (the handler would return the same again); '0' = stale
--   token (the task was taken back): refused, counted in stats "stale", nothing changed;
--   '3' = its cancellation was asked for while it ran, or a child it added had failed
--   under its on_dep_fail 'cancel': it ends cancelled, whatever the handler returned (the
--   result is not stored); '4' = a child it added had failed (on_dep_fail 'fail'): it
--   ends dead, reason 'dependency failed', the result not stored; '5' = children it added
--   are still out: its result is stored and it waits ('waiting') for them, done once they
--   are, dead or cancelled by its policy if one fails (neither done nor dead yet).
--   A completion this same token already applied (a retry after a reply that never came)
--   answers as it did then and changes nothing. Waiters on a finished task are woken
--   (includes/wake_waiters.lua).
--   With a claim: {that string, then claim.lua's reply: retry_after_ms, next_due_ms, tasks
--   (or -1, record: another incarnation holds the name, or '' with registered '1': the
--   name has no readable record; nothing claimed, the completions applied)}.
-- A task that ends done keeps no error of an earlier attempt (field 'error' dropped).
-- A finished task's checkpoint is dropped unless its run asked to keep it (checkpoint.lua).
-- Done tasks are kept done_retention_s (0: not at all, the hash is deleted at once), a
-- flow's members until a retention after the flow ends (flow_prune); each
-- call prunes as many expired ones as it completes, and more, so retention keeps up with
-- any completion rate without waiting for a sweep.
--- @include "event"
--- @include "now_ms"
--- @include "cfg_num"
--- @include "call_chunked"
--- @include "bump"
--- @include "flush_counts"
--- @include "notify"
--- @include "wake_waiters"
--- @include "to_dead"
--- @include "output_end"
--- @include "to_cancelled"
--- @include-lazy "cancel_task"
--- @include "group_left"
--- @include "claim_tasks"
--- @include "quota_relax"
--- @include "flow_finished"
--- @include "flow_backlog"
--- @include "flow_prune"
--- @include "attempt_log"
--- @include "rate_note"
local n = tonumber(ARG_N)
local now = now_ms()
local max_bytes = cfg_num('max_payload_bytes')
local retention_ms = cfg_num('done_retention_s') * 1000
local out = {}
local completed = 0
-- Index updates go out in one call each (per pod for the pod sets), not one per task:
-- what leave_running does per task, batched.
local finished, done, gone, by_pod = {}, {}, {}, {}
for i = 0, n - 1 do
  local id, token, result = RECORD(i + 1)
  local key = K_TASK .. id
  local v = redis.call('HMGET', key, 'state', 'token', 'pod', 'cancel_requested', 'waiters',
    'dependants', 'join', 'group', 'flow', 'error', 'checkpoint_keep', 'output')
  if v[1] == 'running' and v[2] == token then
    -- a task that added children at run time (join): children left, one failed
    local join = v[7] and redis.call('HMGET', key, 'deps_left', 'dep_failed', 'on_dep_fail') or {}
    local pod = v[3]
    finished[#finished + 1] = id
    if pod then
      local ids = by_pod[pod] or {}
      ids[#ids + 1] = id
      by_pod[pod] = ids
    end
    if v[8] and v[8] ~= '' then group_left(v[8]) end
    -- the token stays: it tells a retry of this write from a stale one; a checkpoint goes
    -- (in the same call: a task that never checkpointed pays nothing more) unless kept
    if v[11] then
      redis.call('HDEL', key, 'lease_until')
    else
      redis.call('HDEL', key, 'lease_until', 'checkpoint')
    end
    if v[4] then
      attempt_log(key, 'cancelled', now)
      to_cancelled(id, key, now)
      out[#out + 1] = '3'
    elseif join[2] and join[3] == 'cancel' then
      attempt_log(key, 'cancelled', now, join[2])
      -- it added a child that had already failed, policy cancel: it ends cancelled, and
      -- so do its other children still unfinished (as flow_end does for a waiting task)
      to_cancelled(id, key, now)
      redis.call('HSET', key, 'error', join[2])
      local ok, kids = pcall(cjson.decode, redis.call('HGET', key, 'after') or '[]')
      if ok and type(kids) == 'table' then
        for _, kid in ipairs(kids) do cancel_task(kid, K_TASK .. kid, now) end
      end
      out[#out + 1] = '3'
    elseif join[2] then
      -- it added children at run time and one failed (flow_resolve): its policy ends it
      attempt_log(key, 'dead', now, join[2])
      to_dead(id, key, now, 'dependency failed', join[2])
      out[#out + 1] = '4'
    elseif string.len(result) > max_bytes then
      local err = 'the result of ' .. string.len(result) .. ' bytes exceeds max_payload_bytes ('
        .. max_bytes .. '); not stored'
      attempt_log(key, 'dead', now, err)
      to_dead(id, key, now, 'result too large', err)
      bump('failed')
      rate_note(now, 'failed', 1)
      out[#out + 1] = '2'
    elseif (tonumber(join[1]) or 0) > 0 then
      -- children it added are still out: done once they are (flow_join_done)
      if result ~= '' then redis.call('HSET', key, 'result', result) end
      redis.call('HSET', key, 'state', 'waiting')
      redis.call('ZADD', K_WAITING, now, id)
      out[#out + 1] = '5'
    else
      if retention_ms <= 0 then
        gone[#gone + 1] = key
      else
        done[#done + 1] = now
        done[#done + 1] = id
        -- an earlier attempt's error is not this done task's
        if v[10] then redis.call('HDEL', key, 'error') end
        if result ~= '' then
          redis.call('HSET', key, 'state', 'done', 'finished_at', now, 'result', result)
        else
          redis.call('HSET', key, 'state', 'done', 'finished_at', now)
        end
      end
      output_end(id, 'done', v[12])
      wake_waiters(id, key, v[5])
      flow_finished(id, 'd', v[6], result, v[9])
      completed = completed + 1
      event('done', id)
      out[#out + 1] = '1'
    end
  elseif v[2] == token and (v[1] == 'done' or v[1] == 'dead' or v[1] == 'cancelled'
      or v[1] == 'waiting') then
    -- applied already by this very write (or ended since, as the children it added did)
    if v[1] == 'dead' then
      local dead = redis.call('HGET', key, 'reason') == 'dependency failed' and '4' or '2'
      out[#out + 1] = dead
    else
      out[#out + 1] = ({done = '1', cancelled = '3', waiting = '5'})[v[1]]
    end
  else
    out[#out + 1] = '0'
    bump('stale')
  end
end
call_chunked('ZREM', K_RUNNING, finished)
for pod, ids in pairs(by_pod) do call_chunked('SREM', K_POD .. pod, ids) end
if #done > 0 then
  call_chunked('ZADD', K_DONE, done)
end
if #gone > 0 then
  call_chunked('DEL', gone[1], gone)
end
bump('completed', completed)
rate_note(now, 'completed', completed)
flow_backlog(nil)  -- dependants a busy earlier call left to resolve
-- Retention as it goes: up to twice this call's completions (and at least 10), so the
-- done set shrinks back to its retention window after any burst.
local cutoff = now - retention_ms
-- (members of a flow not ended, or ended within retention, stay: flow_prune)
local expired = redis.call('ZRANGEBYSCORE', K_DONE, '-inf', cutoff, 'LIMIT', 0, 2 * n + 10)
flow_prune(K_DONE, expired, now, cutoff)
-- a freed slot under a global concurrency limit is work for an idle worker
if cfg_num('max_concurrency') > 0 and completed > 0
    and (redis.call('ZCARD', K_PENDING) > 0 or redis.call('EXISTS', K_GROUPS) == 1) then
  notify(completed)
end
local flags = table.concat(out)
if ARG_POD == '' then
  flush_counts()
  return flags
end
local claimed = claim_tasks(now, ARG_POD, ARG_INCARNATION, tonumber(ARG_MAX_TASKS),
  ARG_TOKEN_BASE, tonumber(ARG_BOUND), tonumber(ARG_IDLE_MS), tonumber(ARG_PREFETCH), nil,
  ARG_REGISTERED == '1', ARG_QUOTA_SLOTS == '1')
-- a success shortens the next adaptive claim pause (quota_relax.lua), read by the claim
-- just made: a completion that claims nothing (a draining worker's) leaves it as it is
if completed > 0 then quota_relax(K_QUOTA, now) end
flush_counts()
table.insert(claimed, 1, flags)
return claimed

-- fail: an attempt failed. Retry later (delayed, exponential backoff with jitter, capped)
-- or go dead with the error once attempts reach max_attempts or the error is permanent.
-- Arguments: ARG_* (signatures.Fail): retryable '1' | '0'; jitter: a draw in [-1, 1] (from
--   the caller); reason: the dead reason ('' = 'failed'); retry_after_ms (optional): retry
--   after this many ms, as the handler asked (RetryAfter): the attempt is given back (not
--   counted) up to max_deferrals times per task; past that it counts like any failure,
--   and the retry still waits the asked delay. throttle '1': the handler met a provider's
--   rate limit (RateLimited): the whole queue pauses claiming (quota_pause; retry_after_ms
--   is the provider's retry-after, '' = none: the adaptive pause) and the task waits out the
--   pause as a deferral (its attempt given back, as above). throttle '2': the same for the
--   task's group alone (its own quota fields in K_GROUP .. group; group_pause parks the
--   group), or for the queue when the task has no group.
-- Returns: the new state, 'delayed' or 'dead'; 'cancelled' when the task's cancellation
--   was asked for while it ran (it ends so, whatever the failure); or 'stale' (refused,
--   counted). A retry of a failure this token already wrote (its reply was lost) returns
--   the state it left.
--- @include "event"
--- @include "now_ms"
--- @include "cfg_num"
--- @include "bump"
--- @include "flush_counts"
--- @include "to_dead"
--- @include "to_cancelled"
--- @include "leave_running"
--- @include "quota_pause"
--- @include "group_pause"
--- @include "attempt_log"
--- @include "rate_note"
local id, token, err = ARG_TASK_ID, ARG_TOKEN, ARG_ERROR
local MAX_DELAY_MS = 3153600000000  -- bounds.MAX_DELAY_S (100 years) in ms
local key = K_TASK .. id
local v = redis.call('HMGET', key, 'state', 'token', 'pod', 'cancel_requested', 'group')
if v[1] ~= 'running' or v[2] ~= token then
  if v[2] == token and (v[1] == 'delayed' or v[1] == 'dead' or v[1] == 'cancelled') then
    return v[1]
  end
  bump('stale')
  flush_counts()
  return 'stale'
end
local pod = v[3]
local now = now_ms()
local tb = ARG_TRACEBACK
leave_running(id, key, pod, true)
local after = tonumber(ARG_RETRY_AFTER_MS)
if after ~= nil then
  -- whatever a client sends ('nan', 'inf', -1, 1e300): 0..MAX_DELAY_MS, an exact integer
  if after ~= after or after < 0 then after = 0 end
  after = math.floor(math.min(after, MAX_DELAY_MS))
end
if ARG_THROTTLE == '2' and v[5] and v[5] ~= '' then
  local till = quota_pause(K_GROUP .. v[5], now, after, err)
  group_pause(v[5], till)
  after = till - now
elseif ARG_THROTTLE == '1' or ARG_THROTTLE == '2' then
  after = quota_pause(K_QUOTA, now, after, err) - now
end
if v[4] then
  attempt_log(key, 'cancelled', now, err, tb)
  to_cancelled(id, key, now)
  flush_counts()
  return 'cancelled'
end
if after ~= nil then
  if redis.call('HINCRBY', key, 'deferred', 1) <= (tonumber(ARG_MAX_DEFERRALS) or 0) then
    attempt_log(key, 'retried', now, err, tb)
    -- the cause is outside the task (rate limited upstream): its start is given back
    redis.call('HINCRBY', key, 'attempts', -1)
    redis.call('ZADD', K_DELAYED, now + after, id)
    redis.call('HSET', key, 'state', 'delayed', 'run_at', now + after, 'error', err)
    event('retried', id)
    bump('deferred')
    flush_counts()
    return 'delayed'
  end
end
bump('failed')
rate_note(now, 'failed', 1)
local v = redis.call('HMGET', key, 'attempts', 'max_attempts')
event('failed', id, v[1])
local attempts = tonumber(v[1]) or 1
local max_attempts = tonumber(v[2]) or cfg_num('max_attempts')
local timed_out = ARG_TIMED_OUT == '1'
if ARG_RETRYABLE ~= '1' or attempts >= max_attempts then
  local reason = ARG_REASON
  if reason == '' then reason = 'failed' end
  attempt_log(key, timed_out and 'timed out' or 'dead', now, err, tb)
  to_dead(id, key, now, reason, err)
  flush_counts()
  return 'dead'
end
local delay = after
if delay == nil then
  local base = cfg_num('backoff_base_s') * 1000
  local cap = cfg_num('backoff_max_s') * 1000
  delay = math.min(cap, base * 2 ^ (attempts - 1))
  delay = delay * (1 + (tonumber(ARG_JITTER) or 0) * cfg_num('backoff_jitter'))
  delay = math.floor(math.max(0, math.min(cap, delay)))
end
local run_at = now + delay
attempt_log(key, timed_out and 'timed out' or 'failed', now, err, tb)
redis.call('ZADD', K_DELAYED, run_at, id)
redis.call('HSET', key, 'state', 'delayed', 'run_at', run_at, 'error', err)
event('retried', id)
bump('retried')
flush_counts()
return 'delayed'

-- complete: finish tasks with their results (a batch is one round trip).
-- KEYS[1..18]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_RUNNING,
--   K_DONE, K_POD, K_CONFIG, K_STATS, K_PENDING, K_NOTIFY.
-- ARGV[1]: number of tasks N; then triples: task id, claim token, result JSON ('' = none);
--   then, optionally, a claim for the slots this frees (saves the worker a round trip):
--   pod, incarnation, n (max tasks), token base, housekeeping bound, idle ms, prefetch, as
--   claim.lua takes them.
-- Returns: a string of N characters, one per task: '1' = completed; '0' = stale token (the
--   task was taken back): refused, counted in stats "stale", nothing changed.
--   With a claim: {that string, then claim.lua's reply: retry_after_ms, next_due_ms, tasks}.
local n = tonumber(ARGV[1])
local claim_at = 2 + n * 3
local now = now_ms()
local max_bytes = cfg_num('max_payload_bytes', 1048576)
local out = {}
local completed = 0
-- Index updates go out in one call each (per pod for the pod sets), not one per task:
-- what leave_running does per task, batched.
local finished, done, by_pod = {}, {}, {}
for i = 0, n - 1 do
  local id, token, result = ARGV[2 + i * 3], ARGV[3 + i * 3], ARGV[4 + i * 3]
  local key = K_TASK .. id
  local ok, pod = holds(key, token)
  if ok then
    finished[#finished + 1] = id
    if pod then
      local ids = by_pod[pod] or {}
      ids[#ids + 1] = id
      by_pod[pod] = ids
    end
    redis.call('HDEL', key, 'token', 'lease_until')
    done[#done + 1] = now
    done[#done + 1] = id
    if string.len(result) > max_bytes then
      redis.call('HSET', key, 'state', 'done', 'finished_at', now, 'error',
        'result of ' .. string.len(result) .. ' bytes exceeds max_payload_bytes; dropped')
    elseif result ~= '' then
      redis.call('HSET', key, 'state', 'done', 'finished_at', now, 'result', result)
    else
      redis.call('HSET', key, 'state', 'done', 'finished_at', now)
    end
    completed = completed + 1
    out[#out + 1] = '1'
  else
    out[#out + 1] = '0'
    bump('stale')
  end
end
call_chunked('ZREM', K_RUNNING, finished)
for pod, ids in pairs(by_pod) do call_chunked('SREM', K_POD .. pod, ids) end
call_chunked('ZADD', K_DONE, done)
bump('completed', completed)
-- a freed slot under a global concurrency limit is work for an idle worker
if cfg_num('max_concurrency', 0) > 0 and completed > 0 and redis.call('ZCARD', K_PENDING) > 0 then
  notify(completed)
end
local flags = table.concat(out)
if ARGV[claim_at] == nil then
  flush_counts()
  return flags
end
local claimed = claim_tasks(now, ARGV[claim_at], ARGV[claim_at + 1], tonumber(ARGV[claim_at + 2]),
  ARGV[claim_at + 3], tonumber(ARGV[claim_at + 4]), tonumber(ARGV[claim_at + 5]),
  tonumber(ARGV[claim_at + 6]))
flush_counts()
table.insert(claimed, 1, flags)
return claimed

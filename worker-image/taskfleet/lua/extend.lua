-- extend: the heartbeat. Extends every lease the caller still holds and refreshes the
-- worker's record, in one call per heartbeat whatever the number of tasks.
-- KEYS[1..16]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_RUNNING,
--   K_WORKERS, K_CONFIG.
-- ARGV[1] pod, ARGV[2] incarnation, ARGV[3] inflight, ARGV[4] draining ('1'|'0'),
--   ARGV[5] concurrency, then pairs: task id, claim token
-- Returns: ids whose token no longer matches (taken back: the worker must abandon them).
local pod, incarnation = ARGV[1], ARGV[2]
local now = now_ms()
local lease_until = now + math.floor(cfg_num('lease_ttl_s', 30) * 1000)
local lost = {}
for i = 6, #ARGV, 2 do
  local id, token = ARGV[i], ARGV[i + 1]
  local key = K_TASK .. id
  if holds(key, token) then
    redis.call('ZADD', K_RUNNING, 'XX', lease_until, id)
    redis.call('HSET', key, 'lease_until', lease_until)
  else
    lost[#lost + 1] = id
  end
end
redis.call('HSET', K_WORKERS, pod, worker_record(incarnation, now, ARGV[3], ARGV[5], ARGV[4]))
return lost

-- register: a worker starts. Takes back what earlier incarnations of the same pod held
-- (a restarted container keeps its pod name) and records the worker.
-- KEYS[1..18]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_PENDING,
--   K_RUNNING, K_DEAD, K_DEADLINES, K_POD, K_WORKERS, K_CONFIG, K_SEQ, K_STATS, K_NOTIFY,
--   K_IDLE, K_WAKE.
-- ARGV[1] pod, ARGV[2] incarnation, ARGV[3] concurrency
-- Returns: {requeued to pending, gone dead}
local pod, incarnation = ARGV[1], ARGV[2]
local now = now_ms()
-- an earlier incarnation that died waiting must get no more hand-offs: they would reach
-- no one (and what was handed to it already is taken back just below)
forget_idle(pod, incarnation)
local requeued, dead = requeue_pod(pod, incarnation, now)
redis.call('HSET', K_WORKERS, pod, worker_record(incarnation, now, 0, ARGV[3], '0'))
flush_counts()
return {requeued, dead}

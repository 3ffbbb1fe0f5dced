-- fire_schedule: enqueue a cron schedule's task at most once per (name, slot), however
-- many sweepers call it: the last fired slot only moves forward, inside this script.
-- KEYS[1..19]: the queue's key set (keys.SCRIPT_KEYS), used here: K_SCHED, K_TASK,
--   K_PENDING, K_DELAYED, K_DEADLINES, K_CONFIG, K_SEQ, K_STATS, K_NOTIFY, K_DEMAND.
-- ARGV[1] schedule name, ARGV[2] slot (integer, e.g. epoch seconds of the cron tick),
--   ARGV[3] task id, ARGV[4] payload JSON, ARGV[5] priority
-- Returns: the task id if this call fired the slot, false (nil) otherwise, or
--   {-1, size, max} when the payload exceeds max_payload_bytes (nothing stored, the slot
--   not marked: the queue's one bound on payloads, as enqueue applies it).
local sched_key = K_SCHED .. ARGV[1]
local slot = tonumber(ARGV[2])
local last = tonumber(redis.call('GET', sched_key))
if last ~= nil and last >= slot then return false end
local max_bytes = cfg_num('max_payload_bytes', 1048576)
local size = string.len(ARGV[4])
if size > max_bytes then return {-1, size, max_bytes} end
redis.call('SET', sched_key, ARGV[2])
local now = now_ms()
local created, immediate = enqueue_task(now, ARGV[3], ARGV[4], ARGV[5], 0, '', '', 1, '')
if created == 1 and immediate then notify(1) end
flush_counts()
if created == 1 then return ARGV[3] end
return false

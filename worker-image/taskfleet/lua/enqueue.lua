-- enqueue: create tasks in one atomic call (a batch is one round trip).
-- KEYS[1..18]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_PENDING,
--   K_DELAYED, K_DEADLINES, K_CONFIG, K_SEQ, K_STATS, K_NOTIFY; handing tasks over, also
--   K_IDLE, K_WAKE and what claim.lua uses.
-- ARGV[1]: number of tasks N; then 8 values per task:
--   id, payload (JSON), priority, delay_ms, deadline ('' | '<ms>' | '@<epoch ms>'),
--   max_attempts (''=config), cost, timeout_s (''=config);
--   then, optionally, a token base and a housekeeping bound: new tasks are then handed
--   straight to idle workers (claimed for them and pushed onto their wake lists)
-- Returns: {1, created_1, ..., created_N} (1 = new, 0 = the id existed, nothing changed)
--   or {-1, index, size, max} when payload #index exceeds max_payload_bytes (nothing stored).
local n = tonumber(ARGV[1])
local max_bytes = cfg_num('max_payload_bytes', 1048576)
for i = 1, n do
  local size = string.len(ARGV[2 + (i - 1) * 8 + 1])
  if size > max_bytes then return {-1, i, size, max_bytes} end
end
local now = now_ms()
local out = {1}
local woken = 0
for i = 1, n do
  local b = 1 + (i - 1) * 8
  local created, immediate = enqueue_task(now, ARGV[b + 1], ARGV[b + 2], ARGV[b + 3], ARGV[b + 4],
    ARGV[b + 5], ARGV[b + 6], ARGV[b + 7], ARGV[b + 8])
  out[#out + 1] = created
  if immediate and created == 1 then woken = woken + 1 end
end
local token_base = ARGV[2 + n * 8]
if token_base and woken > 0 and redis.call('EXISTS', K_IDLE) == 1 then
  woken = woken - hand_off(now, woken, token_base, tonumber(ARGV[3 + n * 8]))
end
notify(woken)
flush_counts()
return out

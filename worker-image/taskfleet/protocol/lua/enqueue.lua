-- enqueue: create tasks in one atomic call (a batch is one round trip).
-- KEYS[1..19]: the queue's key set (keys.SCRIPT_KEYS), used here: K_TASK, K_PENDING,
--   K_DELAYED, K_DEADLINES, K_CONFIG, K_SEQ, K_STATS, K_NOTIFY, K_DEMAND; handing tasks over, also
--   K_IDLE, K_WAKE and what claim.lua uses.
-- ARGV[1]: number of tasks N; then 8 values per task:
--   id, payload (JSON; a named task's prefixed with \1 name \1), priority, delay_ms,
--   deadline ('' | '<ms>' | '@<epoch ms>'),
--   max_attempts (''=config), cost, timeout_s (''=config);
--   then, optionally, a token base and a housekeeping bound: new tasks are then handed
--   straight to idle workers (claimed for them and pushed onto their wake lists; a token
--   base of '' hands nothing over); then, optionally, the producer's trace context,
--   stored with every new task (field 'trace', see protocol/tracing.py)
-- An id that exists is the same task enqueued again when its payload, priority, cost,
-- timeout and (if given) max_attempts are the same: nothing changes. Otherwise it is a
-- conflict, checked for every task before anything is written (field 'name' when the
-- payloads differ in their task name).
-- Returns: {1, created_1, ..., created_N} (1 = new, 0 = the same task existed, unchanged)
--   or {-1, index, size, max} when payload #index exceeds max_payload_bytes,
--   or {-2, index, field} when task #index names an existing task that differs in field,
--   or {-3, index} when task #index repeats an id of an earlier task of the call;
--   in those three cases nothing is stored.
--- @include "now_ms"
--- @include "cfg_num"
--- @include "flush_counts"
--- @include "notify"
--- @include "demand"
--- @include "create_task"
--- @include "task_differs"
--- @include-lazy "hand_off"
-- lazy: hand_off
local n = tonumber(ARGV[1])
local max_bytes = cfg_num('max_payload_bytes', 1048576)
local exists = {}
local seen = {}
for i = 1, n do
  local b = 1 + (i - 1) * 8
  local id, payload = ARGV[b + 1], ARGV[b + 2]
  local size = string.len(payload)
  if size > max_bytes then return {-1, i, size, max_bytes} end
  if seen[id] then return {-3, i} end
  seen[id] = true
  local key = K_TASK .. id
  if redis.call('EXISTS', key) == 1 then
    local field = task_differs(key, payload, ARGV[b + 3], ARGV[b + 6], ARGV[b + 7], ARGV[b + 8])
    if field then return {-2, i, field} end
    exists[i] = true
  end
end
local now = now_ms()
local trace = ARGV[4 + n * 8]
local out = {1}
local woken = 0
for i = 1, n do
  local b = 1 + (i - 1) * 8
  if exists[i] then
    out[#out + 1] = 0
  else
    local id = ARGV[b + 1]
    if create_task(now, K_TASK .. id, id, ARGV[b + 2], ARGV[b + 3], ARGV[b + 4], ARGV[b + 5],
        ARGV[b + 6], ARGV[b + 7], ARGV[b + 8], trace) then
      woken = woken + 1
    end
    out[#out + 1] = 1
  end
end
local created = 0
for i = 2, #out do created = created + out[i] end
local token_base = ARGV[2 + n * 8]
if token_base and token_base ~= '' and woken > 0 and redis.call('EXISTS', K_IDLE) == 1 then
  woken = woken - hand_off(now, woken, token_base, tonumber(ARGV[3 + n * 8]))
end
notify(woken)
-- Handed off or delayed, new tasks are still work the queue's watchers must see.
if created > 0 and woken <= 0 then demand() end
flush_counts()
return out

-- emit: append a chunk to a running task's output stream (current_task().emit).
-- Arguments: ARG_* (signatures.Emit): task id, the claim token of the run, kind ('t' text,
--   'j' JSON text), the chunk, the caps of the task's output (entries, bytes).
-- The entry (K_OUTPUT .. id) holds 'a' (the run's attempt), 'k' (kind) and 'd' (the
--   chunk). The task's 'output' field is set to '1' (the finishing scripts then end the
--   stream: output_end) and 'output_bytes' counts the chunks' bytes. A stream a finished
--   task left (with its retention as TTL) is kept again while the task runs once more.
-- Returns: the entry's id; 0 refused (the run does not hold the task: state not running or
--   another token); -1 refused: the output holds max_entries entries already, or this
--   chunk would take its bytes past max_bytes. Nothing changes on a refusal.
local key = K_TASK .. ARG_TASK_ID
local v = redis.call('HMGET', key, 'state', 'token', 'attempts', 'output_bytes')
if v[1] ~= 'running' or v[2] ~= ARG_TOKEN then return 0 end
local out = K_OUTPUT .. ARG_TASK_ID
local bytes = (tonumber(v[4]) or 0) + string.len(ARG_DATA)
if bytes > tonumber(ARG_MAX_BYTES) or redis.call('XLEN', out) >= tonumber(ARG_MAX_ENTRIES) then
  return -1
end
redis.call('HSET', key, 'output', '1', 'output_bytes', bytes)
local entry = redis.call('XADD', out, '*', 'a', v[3] or '1', 'k', ARG_KIND, 'd', ARG_DATA)
redis.call('PERSIST', out)
return entry

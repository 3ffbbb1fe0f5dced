-- checkpoint: store a running task's state for its next attempt (current_task().checkpoint).
-- Arguments: ARG_* (signatures.Checkpoint): task id, the claim token of the run, the state
--   (JSON text, no NUL byte), keep (1: the state stays with the task once it finished,
--   beside its result; 0: dropped then), max_bytes (the caller's MAX_CHECKPOINT_BYTES).
-- The state goes in the task's field 'checkpoint', replacing the one before; the next
--   claim of the task carries it in its claim record ('checkpoint'). 'checkpoint_keep' is
--   '1' while the run asked to keep it; complete, to_dead and to_cancelled drop the
--   checkpoint unless it is set.
-- A stored state is the event `checkpointed` (with the attempt) on the queue's event
--   stream and the task's follow stream, while they are on (includes/event.lua).
-- Returns: 1 stored; 0 refused (the run does not hold the task: state not running or
--   another token; nothing changed); -1 refused: larger than max_bytes, or holds a NUL.
--- @include "event"
local key = K_TASK .. ARG_TASK_ID
local v = redis.call('HMGET', key, 'state', 'token', 'attempts')
if v[1] ~= 'running' or v[2] ~= ARG_TOKEN then return 0 end
local state = ARG_STATE
if string.len(state) > tonumber(ARG_MAX_BYTES) or string.find(state, '\0', 1, true) then
  return -1
end
if ARG_KEEP == '1' then
  redis.call('HSET', key, 'checkpoint', state, 'checkpoint_keep', '1')
else
  redis.call('HSET', key, 'checkpoint', state)
  redis.call('HDEL', key, 'checkpoint_keep')
end
event('checkpointed', ARG_TASK_ID, v[3])
return 1

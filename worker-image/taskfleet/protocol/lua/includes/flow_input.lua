--- @include "cfg_num"
-- Hand the result of dependency `dep` (JSON text; '' or nil: null) to the task at `key`
-- that waits for it: field 'in:<dep>'. A task's inputs together are bounded by
-- max_payload_bytes (field 'in_bytes' counts them): a result that would pass it is not
-- handed (the dependant sees that dependency without a result, and may read the task).
local function flow_input(key, dep, result)
  if result == nil or result == false or result == '' then result = 'null' end
  local size = string.len(result)
  local used = tonumber(redis.call('HGET', key, 'in_bytes')) or 0
  if used + size > cfg_num('max_payload_bytes') then return end
  redis.call('HSET', key, 'in:' .. dep, result, 'in_bytes', used + size)
end

--- @include "call_chunked"
-- The zset flows keeps a flow's id while its record lives: +inf while open, then when the
-- record expires (flow_member_end). Drop up to `bound` entries whose record has expired,
-- so the zset stays as large as the flows kept, and empty (flow_prune's fast way) once
-- none is.
local function flows_expire(now, bound)
  local ids = redis.call('ZRANGEBYSCORE', K_FLOWS, '-inf', now, 'LIMIT', 0, bound)
  call_chunked('ZREM', K_FLOWS, ids)
end

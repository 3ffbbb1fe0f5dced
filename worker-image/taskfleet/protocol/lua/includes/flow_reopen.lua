--- @include "flow_add"
-- A dead member of flow `fid` runs again (retry): no longer counted dead but open, and
-- the flow open again if it had ended (flow_add). A record gone (expired) starts anew.
local function flow_reopen(fid, key, now)
  local fkey = K_FLOW .. fid
  if (tonumber(redis.call('HGET', fkey, 'dead')) or 0) > 0 then
    redis.call('HINCRBY', fkey, 'dead', -1)
  end
  flow_add(fid, key, 'pending', now)
end

--- @include "flow_add"
-- A dead or cancelled member (`was`, its state) of flow `fid` runs again (retry): no
-- longer counted so but open, and the flow open again if it had ended (flow_add). A record
-- gone (expired) starts anew.
local function flow_reopen(fid, key, was, now)
  local fkey = K_FLOW .. fid
  if (tonumber(redis.call('HGET', fkey, was)) or 0) > 0 then
    redis.call('HINCRBY', fkey, was, -1)
  end
  flow_add(fid, key, 'pending', now)
end

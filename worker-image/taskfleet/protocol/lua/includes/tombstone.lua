--- @include "pod_of"
-- Tombstone the name's pod for ttl_s seconds (register refuses it: tombstoned); expired
-- tombstones are dropped on the way: the set holds only pods deleted within the TTL.
local function tombstone(name, now, ttl_s)
  redis.call('ZREMRANGEBYSCORE', K_TOMBSTONES, '-inf', now)
  if ttl_s > 0 then redis.call('ZADD', K_TOMBSTONES, now + math.floor(ttl_s * 1000), pod_of(name)) end
end

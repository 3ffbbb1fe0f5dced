--- @include "now_ms"
--- @include "bump"
--- @include "cfg_num"
-- A member of flow `fid` ended with `outcome` ('d' done, 'x' dead, 'c' cancelled): its
-- record flow:<fid> counts it. When it was the last member open, the flow ends: outcome
-- 'failed' when a member is dead, else 'cancelled' when one is cancelled, else 'done';
-- 'ended_at', counted in stats as flows_<outcome>; the record expires once its members
-- may go (the longer retention, at least a minute), its score in the zset flows then.
-- O(1): a few commands on the flow's record, whatever its size.
local FLOW_ENDS = {d = 'done', x = 'dead', c = 'cancelled'}
local function flow_member_end(fid, outcome)
  local fkey = K_FLOW .. fid
  redis.call('HINCRBY', fkey, FLOW_ENDS[outcome], 1)
  local open = redis.call('HINCRBY', fkey, 'open', -1)
  if open > 0 then return end
  local keep = math.max(cfg_num('done_retention_s'), cfg_num('dead_retention_s'), 60)
  if open < 0 then
    -- a record deleted by hand, or the member counted twice: no second ending
    redis.call('HSET', fkey, 'open', 0)
    if redis.call('PTTL', fkey) < 0 then redis.call('PEXPIRE', fkey, math.floor(keep * 1000)) end
    return
  end
  local v = redis.call('HMGET', fkey, 'dead', 'cancelled')
  local how = 'done'
  if (tonumber(v[1]) or 0) > 0 then
    how = 'failed'
  elseif (tonumber(v[2]) or 0) > 0 then
    how = 'cancelled'
  end
  local now = now_ms()
  redis.call('HSET', fkey, 'ended_at', now, 'outcome', how)
  redis.call('PEXPIRE', fkey, math.floor(keep * 1000))
  redis.call('ZADD', K_FLOWS, now + math.floor(keep * 1000), fid)
  bump('flows_' .. how)
end

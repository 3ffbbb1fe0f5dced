-- The task whose hash is at `key`, in `state`, joins flow `fid`: field 'flow', and the
-- flow's record counts it, open or by how it ended ('started_at' set when new). An open
-- member that makes the flow open again (it had ended, or is new) drops 'ended_at',
-- 'outcome' and the record's expiry, and scores it +inf in the zset flows (open): a flow
-- that ended and gains a member is counted again when it ends again. O(1).
local FLOW_STATES = {done = 'done', dead = 'dead', cancelled = 'cancelled'}
local function flow_add(fid, key, state, now)
  local fkey = K_FLOW .. fid
  redis.call('HSET', key, 'flow', fid)
  local ended = FLOW_STATES[state]
  local n = redis.call('HINCRBY', fkey, ended or 'open', 1)
  redis.call('HSETNX', fkey, 'started_at', now)
  if not ended and n == 1 then
    redis.call('HDEL', fkey, 'ended_at', 'outcome')
    redis.call('PERSIST', fkey)
    redis.call('ZADD', K_FLOWS, 'inf', fid)
  end
end

--- @include "call_chunked"
-- Retention of finished tasks: `ids` of the zset `zkey` whose time (finished_at) is
-- before `cutoff` go, tasks and index entries, except members of flows whose records
-- must stay: one of a flow not ended is re-scored to `now` (looked at again a retention
-- later); one of a flow that ended after `cutoff` is re-scored to that end (it goes a
-- retention after the flow's end). A queue that has no flow record (the zset flows is
-- empty) pays one EXISTS per call; otherwise each id costs one or two reads. Returns how
-- many were deleted.
local function flow_prune(zkey, ids, now, cutoff)
  if #ids == 0 then return 0 end
  local gone = ids
  if redis.call('EXISTS', K_FLOWS) == 1 then
    gone = {}
    for _, id in ipairs(ids) do
      local fid = redis.call('HGET', K_TASK .. id, 'flow')
      local keep
      if fid then
        local v = redis.call('HMGET', K_FLOW .. fid, 'started_at', 'ended_at')
        local ended = tonumber(v[2])
        if v[1] and not ended then
          keep = now
        elseif ended and ended > cutoff then
          keep = ended
        end
      end
      if keep then
        redis.call('ZADD', zkey, keep, id)
      else
        gone[#gone + 1] = id
      end
    end
    if #gone == 0 then return 0 end
  end
  local keys = {}
  for i, id in ipairs(gone) do keys[i] = K_TASK .. id end
  call_chunked('ZREM', zkey, gone)
  call_chunked('DEL', keys[1], keys)
  return #gone
end

--- @include "flow_add"
-- A new task (its hash at `key`) joins a flow: `fid` when the call names one (a flow
-- enqueued whole, or the children of a parent), else the flow of its first dependency in
-- `after` (a JSON array, '' for none) that has one, else a new flow named by its first
-- dependency. Its dependencies in no flow yet join it too (a fan-in over tasks enqueued
-- alone). A dependency of another flow stays in its own: flows do not merge. A task with
-- neither is in no flow. O(its dependencies), as flow_hold.
local function flow_join(key, after, fid, now)
  local deps = {}
  if after ~= '' then
    local ok, decoded = pcall(cjson.decode, after)
    if ok and type(decoded) == 'table' then deps = decoded end
  end
  if not fid and #deps == 0 then return end
  local found, seen = {}, {}
  for i, dep in ipairs(deps) do
    if not seen[dep] then
      seen[dep] = true
      local v = redis.call('HMGET', K_TASK .. dep, 'flow', 'state')
      if not fid and v[1] then fid = v[1] end
      found[i] = v
    end
  end
  fid = fid or deps[1]
  for i, dep in ipairs(deps) do
    local v = found[i]
    if v and not v[1] and v[2] then flow_add(fid, K_TASK .. dep, v[2], now) end
  end
  flow_add(fid, key, 'pending', now)
end

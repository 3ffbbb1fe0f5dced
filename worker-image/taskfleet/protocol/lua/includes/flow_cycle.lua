-- Whether adopting children would close a dependency cycle through `parent` (a running
-- task adding children at run time). `candidates`: the existing tasks the parent would come
-- to wait for (children that exist, and the existing dependencies new children name). The
-- parent waits for each child; a cycle closes when one of them is the parent or waits for
-- it, directly or through others: they would all wait for ever. The tasks waiting on the
-- parent are found upward through the sets dependants:<id>, keeping those not finished
-- ('waiting', or a parent of children running, pending or delayed), each once.
-- Returns nil (no cycle), the candidate that closes one, or false when more than `bound`
-- tasks wait on the parent (the check's walk is bounded: the call is refused).
local function flow_cycle(parent, candidates, bound)
  local wanted = {}
  for _, id in ipairs(candidates) do
    if id == parent then return id end
    wanted[id] = true
  end
  local met, todo, count = {[parent] = true}, {parent}, 0
  while #todo > 0 do
    local set = K_DEPENDANTS .. table.remove(todo)
    count = count + redis.call('SCARD', set)
    if count > bound then return false end
    for _, m in ipairs(redis.call('SMEMBERS', set)) do
      if not met[m] then
        met[m] = true
        local state = redis.call('HGET', K_TASK .. m, 'state')
        -- unfinished: a parent whose run was taken back (pending, delayed) still waits
        -- for its children, as a running one does
        if state and state ~= 'done' and state ~= 'dead' and state ~= 'cancelled' then
          if wanted[m] then return m end
          todo[#todo + 1] = m
        end
      end
    end
  end
  return nil
end

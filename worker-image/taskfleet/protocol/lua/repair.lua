-- repair: resolve waiting tasks whose dependencies have all ended but whose wake-up never
-- came (a worker of a release before flows completed one, a lost write, a hand edit), as
-- flow_resolve would have: results of done ones handed in (flow_input), a dead, cancelled
-- or missing one ends the task by its policy (flow_end; 'ignore': satisfied), else a task
-- goes pending, a parent waiting on the children it added (field 'join') done
-- (flow_join_done). A task with a dependency still open is left alone. A dependency that
-- ended less than ARG_SETTLE_MS ago and still lists the task in dependants:<dep> is left
-- to the normal path (its resolve may sit on flows:backlog), and so is one whose record
-- is gone while flows:backlog still owes its resolve (done_retention_s 0). The task is taken out of
-- every dependants:<dep> set first, so a later resolve finds nothing to count twice.
-- Arguments: ARG_BOUND, ARG_CURSOR, ARG_SETTLE_MS (signatures.Repair): at most about
--   ARG_BOUND records read (a task and each of its dependencies: one each; at least one
--   task a call), from rank ARG_CURSOR of the zset waiting on.
-- Returns: {the next cursor, more (1: the pass goes on from it; 0: it reached the end
--   of waiting, the next pass starts at 0), then per task repaired its id and the state it
--   left in: 'pending' | 'done' | 'dead' | 'cancelled'}; each counted in
--   stats as flow_repairs.
--- @include "now_ms"
--- @include "bump"
--- @include "notify"
--- @include "flush_counts"
--- @include "flow_ready"
--- @include "flow_input"
--- @include "flow_end"
--- @include "flow_join_done"
local bound = math.max(1, tonumber(ARG_BOUND) or 1)
local cursor = math.max(0, tonumber(ARG_CURSOR) or 0)
local settle = tonumber(ARG_SETTLE_MS) or 0
local now = now_ms()
local ENDED = {done = true, dead = true, cancelled = true}
local ready = 0

-- Whether a resolve of `dep`'s end is still owed to `id` on flows:backlog: a dependency
-- whose record is gone (done under done_retention_s 0) and whose dependants a complete
-- deferred there ('d'/'x'/'c' .. dep, flow_resolve's budget). Its outcome is known only
-- to that entry, so the task is left to it rather than ended as if the dependency were
-- missing.
local function owed(dep, id)
  if redis.call('SISMEMBER', K_DEPENDANTS .. dep, id) == 0 then return false end
  for _, outcome in ipairs({'d', 'x', 'c'}) do
    if redis.call('LPOS', K_FLOW_BACKLOG, outcome .. dep) then return true end
  end
  return false
end

-- The dependencies of waiting task `id` when every one has ended (nil otherwise), with
-- their states ('missing' for a record gone), and the records read.
local function ended_deps(id, after)
  local ok, deps = pcall(cjson.decode, after or '[]')
  if not ok or type(deps) ~= 'table' then deps = {} end
  local unique, states, seen = {}, {}, {}
  for _, dep in ipairs(deps) do
    if type(dep) == 'string' and not seen[dep] then
      seen[dep] = true
      local d = redis.call('HMGET', K_TASK .. dep, 'state', 'finished_at')
      local state = d[1] or 'missing'
      if state ~= 'missing' and not ENDED[state] then return nil, #unique + 1 end
      if state == 'missing' and owed(dep, id) then return nil, #unique + 1 end
      if settle > 0 and (tonumber(d[2]) or 0) > now - settle
          and redis.call('SISMEMBER', K_DEPENDANTS .. dep, id) == 1 then
        return nil, #unique + 1
      end
      unique[#unique + 1] = dep
      states[#unique] = state
    end
  end
  return unique, #unique, states
end

local function repair(id, key, policy, join, deps, states)
  -- what a resolve still owed would do is done here: none may come after
  for _, dep in ipairs(deps) do redis.call('SREM', K_DEPENDANTS .. dep, id) end
  for i, dep in ipairs(deps) do
    local state = states[i]
    -- a missing one whose result was handed in was done (retention dropped its record)
    local handed = redis.call('HEXISTS', key, 'in:' .. dep) == 1
    if state == 'done' then
      if not handed then flow_input(key, dep, redis.call('HGET', K_TASK .. dep, 'result')) end
    elseif policy ~= 'ignore' and not (state == 'missing' and handed) then
      flow_end(id, key, now, policy, dep, state)
      return redis.call('HGET', key, 'state')
    end
  end
  if join then
    flow_join_done(id, key, now)
    return 'done'
  end
  flow_ready(id, key, now)
  ready = ready + 1
  return 'pending'
end

local out = {0, 0}
local ids = redis.call('ZRANGE', K_WAITING, cursor, cursor + bound - 1)
local read, examined, left = 0, 0, 0
for _, id in ipairs(ids) do
  if read >= bound then break end
  examined = examined + 1
  local key = K_TASK .. id
  local v = redis.call('HMGET', key, 'state', 'after', 'on_dep_fail', 'join')
  read = read + 1
  if v[1] == 'waiting' then
    local deps, n, states = ended_deps(id, v[2])
    read = read + n
    if deps then
      local state = repair(id, key, v[3], v[4], deps, states)
      out[#out + 1] = id
      out[#out + 1] = state or 'missing'
      bump('flow_repairs')
      if redis.call('ZSCORE', K_WAITING, id) == false then left = left + 1 end
      -- its dependants resolved now, by the normal path: none is taken for a repair below
      flush_counts()
    end
  end
end
if examined < #ids or #ids == bound then
  out[1], out[2] = cursor + examined - left, 1
end
notify(ready)
flush_counts()
return out

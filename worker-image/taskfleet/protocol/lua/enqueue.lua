-- enqueue: create tasks in one atomic call (a batch is one round trip).
-- Arguments: ARG_* and RECORD(i) (signatures.Enqueue, one EnqueueTask per task). With a
-- token base, new tasks go straight to idle workers (claimed for them and pushed onto
-- their wake lists); a trace context is stored with every new task (field 'trace', see
-- protocol/tracing.py).
-- An id that exists is the same task enqueued again when its payload, priority, cost,
-- timeout, (if given) max_attempts, after and on_dep_fail are the same: nothing changes. Otherwise it is a
-- conflict, checked for every task before anything is written (field 'name' when the
-- payloads differ in their task name, 'group' when only the groups differ).
-- Returns: {1, created_1, ..., created_N} (1 = new, 0 = the same task existed, unchanged)
--   or {-1, index, size, max} when payload #index exceeds max_payload_bytes,
--   or {-2, index, field} when task #index names an existing task that differs in field,
--   or {-3, index} when task #index repeats an id of an earlier task of the call,
--   or {-4, index, id} when task #index waits on (after) an id that is neither a task
--   nor an earlier task of the call;
--   or {-5} when a parent is given and is not running under parent_token (or its
--   cancel was requested);
--   or {-6, pod, feature} when the call uses flows (after, a parent, ARG_FLOW) or groups
--   (a new task's group) while pod, a live worker older than them (older_worker), serves
--   the queue: feature is 'flows', 'groups' or 'flows and groups';
--   or {-7, index, id} when a parent is given and task #index would close a dependency
--   cycle through it: id (the task itself, or one it waits for) is the parent or waits
--   for it, directly or through others (flow_cycle);
--   or {-8, bound} when a parent is given, the call would adopt existing tasks (or
--   children waiting on existing ones), and more than bound tasks wait on the parent:
--   the cycle check's walk is bounded;
--   in those eight cases nothing is stored.
-- With a parent (a running task adding children at run time), each task of the call
-- becomes a child it waits for (flow_adopt): the parent is done once they all are. An id
-- the parent's 'after' names whose record is gone (a child adopted before, done and
-- deleted by retention) is not created again: it answers 0, as an unchanged task.
-- A task with 'after' (a JSON array of ids) waits in state 'waiting' until they are all
-- done (flow_hold); 'on_dep_fail' says what a dead or cancelled one does to it. Given
-- without 'after', it is stored alone: the policy for the children the task adds at run
-- time.
-- Flows (flow_join): with ARG_FLOW (a flow enqueued whole) every new task joins that flow;
-- with a parent, its flow (the parent starts one named by itself when in none); else a
-- task with 'after' joins the flow of its dependencies.
--- @include "now_ms"
--- @include "cfg_num"
--- @include "flush_counts"
--- @include "notify"
--- @include "demand"
--- @include "create_task"
--- @include-lazy "task_differs"
--- @include-lazy "pending_add"
--- @include-lazy "flow_hold"
--- @include-lazy "flow_adopt"
--- @include-lazy "flow_cycle"
--- @include-lazy "flow_append"
--- @include-lazy "flow_join"
--- @include-lazy "flow_add"
--- @include-lazy "hand_off"
--- @include-lazy "older_worker"
local n = tonumber(ARG_N)
local parent_key
-- with a parent: the ids its 'after' names (its dependencies and the children it adopted)
local named = {}
if ARG_PARENT ~= '' then
  parent_key = K_TASK .. ARG_PARENT
  local p = redis.call('HMGET', parent_key, 'state', 'token', 'cancel_requested', 'after')
  -- a run asked to stop (cancel) adds no more children: a flow's cancel leaves none behind
  if p[1] ~= 'running' or p[2] ~= ARG_PARENT_TOKEN or p[3] then return {-5} end
  if p[4] and p[4] ~= '' and p[4] ~= '[]' then
    local ok, ids = pcall(cjson.decode, p[4])
    if ok and type(ids) == 'table' then
      for _, id in ipairs(ids) do named[id] = true end
    end
  end
end
local max_bytes = cfg_num('max_payload_bytes')
local exists = {}
local seen = {}
local uses_flows, uses_groups = ARG_PARENT ~= '' or ARG_FLOW ~= '', false
-- with a parent: the existing tasks it would come to wait for, and the index of each call
-- task that names them (a cycle through the parent can only pass through one of them)
local reach, reach_at = {}, {}
for i = 1, n do
  local id, payload, priority, _, _, max_attempts, cost, timeout, after, on_dep_fail, group =
    RECORD(i)
  local size = string.len(payload)
  if size > max_bytes then return {-1, i, size, max_bytes} end
  if seen[id] then return {-3, i} end
  local key = K_TASK .. id
  if redis.call('EXISTS', key) == 1 then
    local field = task_differs(key, payload, priority, max_attempts, cost, timeout, after,
      on_dep_fail)
    if not field and (redis.call('HGET', key, 'group') or '') ~= group then field = 'group' end
    if field then return {-2, i, field} end
    exists[i] = true
    -- a child adopted before (a run started again adds it again) adds no new wait
    if parent_key and redis.call('HEXISTS', key, 'by:' .. ARG_PARENT) == 0 then
      reach[#reach + 1] = id
      reach_at[#reach] = i
    end
  elseif named[id] then
    -- a child adopted before whose record is gone (a done child under done_retention_s 0):
    -- it ended, and is not created (nor run) again; the parent's 'after' names it already
    exists[i] = 'gone'
  else
    if group ~= '' then uses_groups = true end
    if after ~= '' then
      uses_flows = true
      for _, dep in ipairs(cjson.decode(after)) do
        if not seen[dep] then
          if redis.call('EXISTS', K_TASK .. dep) == 0 then return {-4, i, dep} end
          if parent_key then
            reach[#reach + 1] = dep
            reach_at[#reach] = i
          end
        end
      end
    end
  end
  seen[id] = true
end
-- Checked before anything is written, in this same atomic call: nothing can wait on the
-- parent between the check and the write. Bound: MAX_CYCLE_WALK in docs/flows.md.
if #reach > 0 then
  local closing = flow_cycle(ARG_PARENT, reach, 10000)
  if closing == false then return {-8, 10000} end
  if closing then
    for k, id in ipairs(reach) do
      if id == closing then return {-7, reach_at[k], closing} end
    end
  end
end
-- A worker older than flows or groups would mishandle them without an error: refused.
if uses_flows or uses_groups then
  local pod = older_worker(now_ms())
  if pod then
    return {-6, pod, uses_flows and (uses_groups and 'flows and groups' or 'flows') or 'groups'}
  end
end
local now = now_ms()
local call_flow = ARG_FLOW ~= '' and ARG_FLOW or nil
if parent_key and not call_flow then
  call_flow = redis.call('HGET', parent_key, 'flow')
  if not call_flow then
    call_flow = ARG_PARENT
    flow_add(call_flow, parent_key, 'running', now)
  end
end
local out = {1}
local adopted = {}
local woken = 0
for i = 1, n do
  if exists[i] == 'gone' then
    out[#out + 1] = 0
  elseif exists[i] then
    out[#out + 1] = 0
    local id = RECORD(i)
    if parent_key and flow_adopt(parent_key, ARG_PARENT, id) then adopted[#adopted + 1] = id end
  else
    local id, payload, priority, delay_ms, deadline, max_attempts, cost, timeout, after,
      on_dep_fail, group, quotas = RECORD(i)
    local key = K_TASK .. id
    local ready, score = create_task(now, key, id, payload, priority, delay_ms, deadline,
      max_attempts, cost, timeout, ARG_TRACE, group)
    if score then pending_add(id, score, group) end
    -- provider quotas: a claim reads the field, and reserves, only when it is there
    if quotas ~= '' then redis.call('HSET', key, 'quotas', quotas) end
    if after ~= '' or call_flow then flow_join(key, after, call_flow, now) end
    if after ~= '' then
      redis.call('HSET', key, 'after', after, 'on_dep_fail', on_dep_fail)
      ready = flow_hold(now, id, key, after, on_dep_fail) and ready
    elseif on_dep_fail ~= '' then
      -- the policy for the children it will add at run time (flow_adopt, flow_resolve)
      redis.call('HSET', key, 'on_dep_fail', on_dep_fail)
    end
    if ready then woken = woken + 1 end
    if parent_key and flow_adopt(parent_key, ARG_PARENT, id) then adopted[#adopted + 1] = id end
    out[#out + 1] = 1
  end
end
if parent_key then flow_append(parent_key, adopted) end
local created = 0
for i = 2, #out do created = created + out[i] end
if ARG_TOKEN_BASE ~= '' and woken > 0 and redis.call('EXISTS', K_IDLE) == 1 then
  woken = woken - hand_off(now, woken, ARG_TOKEN_BASE, tonumber(ARG_BOUND))
end
notify(woken)
-- Handed off or delayed, new tasks are still work the queue's watchers must see.
if created > 0 and woken <= 0 then demand() end
flush_counts()
return out

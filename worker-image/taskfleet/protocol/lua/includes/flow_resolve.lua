--- @include "now_ms"
--- @include "flow_q"
--- @include "flow_end"
--- @include "to_pending"
--- @include "notify"
--- @include "flow_input"
-- Resolve the dependants of the tasks in FLOW_Q (flow_finished): a dependency done hands
-- its result to each (flow_input); a dependency done (or,
-- under policy 'ignore', dead or cancelled) counts the dependant's 'deps_left' down, and
-- at 0 it goes from waiting to pending; a dependency dead or cancelled ends it by its
-- policy (flow_end), which may finish more tasks: they join FLOW_Q. At most FLOW_BUDGET
-- dependants per call: the rest stay in their sets, the finished ids on flows:backlog,
-- taken up by the next complete or sweep (flow_backlog), so every call stays short.
local FLOW_BUDGET = 1000
local function flow_resolve()
  local now = now_ms()
  local budget = FLOW_BUDGET
  local ready = 0
  local i = 1
  while i <= #FLOW_Q do
    local entry = FLOW_Q[i]
    i = i + 1
    if budget <= 0 then
      redis.call('RPUSH', K_FLOW_BACKLOG, entry)
    else
      local outcome, id = string.sub(entry, 1, 1), string.sub(entry, 2)
      local set = K_DEPENDANTS .. id
      local members = redis.call('SPOP', set, budget)
      budget = budget - #members
      if budget <= 0 and redis.call('EXISTS', set) == 1 then
        redis.call('RPUSH', K_FLOW_BACKLOG, entry)
      end
      local how = outcome == 'x' and 'dead' or 'cancelled'
      local result = FLOW_Q.results[id]
      if outcome == 'd' and result == nil and #members > 0 then
        result = redis.call('HGET', K_TASK .. id, 'result')  -- from the backlog
      end
      for _, d in ipairs(members) do
        local dkey = K_TASK .. d
        local v = redis.call('HMGET', dkey, 'state', 'on_dep_fail')
        if v[1] == 'waiting' then
          if outcome == 'd' or v[2] == 'ignore' then
            if outcome == 'd' then flow_input(dkey, id, result) end
            if redis.call('HINCRBY', dkey, 'deps_left', -1) <= 0 then
              redis.call('ZREM', K_WAITING, d)
              redis.call('HDEL', dkey, 'deps_left')
              redis.call('HSET', dkey, 'run_at', now)
              to_pending(d, dkey, false)
              ready = ready + 1
            end
          else
            flow_end(d, dkey, now, v[2], id, how)
          end
        end
      end
    end
  end
  FLOW_Q = {results = {}}
  notify(ready)
end

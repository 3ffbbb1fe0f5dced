--- @include "now_ms"
--- @include "flow_q"
--- @include "flow_end"
--- @include "flow_ready"
--- @include "notify"
--- @include "flow_input"
--- @include "flow_join_done"
-- Resolve the dependants of the tasks in FLOW_Q (flow_finished): a dependency done hands
-- its result to each (flow_input); a dependency done (or,
-- under policy 'ignore', dead or cancelled) counts the dependant's 'deps_left' down, and
-- at 0 it goes from waiting to pending; a dependency dead or cancelled ends it by its
-- policy (flow_end), which may finish more tasks: they join FLOW_Q. At most FLOW_BUDGET
-- dependants per call (about 5 ms): the rest stay in their sets, the finished ids on flows:backlog,
-- taken up by the next complete or sweep (flow_backlog), so every call stays short. A
-- sweep, a housekeeping call with a larger bound, sets FLOW_Q.budget to its own.
local FLOW_BUDGET = 200
local function flow_resolve()
  local now = now_ms()
  local budget = FLOW_Q.budget or FLOW_BUDGET
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
        local v = redis.call('HMGET', dkey, 'state', 'on_dep_fail', 'join')
        local state, policy, join = v[1], v[2], v[3]
        local live = state == 'running' or state == 'pending' or state == 'delayed'
        if state == 'waiting' or (join and live) then
          if outcome == 'd' or policy == 'ignore' then
            if outcome == 'd' then flow_input(dkey, id, result) end
            local left = redis.call('HINCRBY', dkey, 'deps_left', -1)
            if left <= 0 and state == 'waiting' then
              if join then
                flow_join_done(d, dkey, now)
              else
                flow_ready(d, dkey, now)
                ready = ready + 1
              end
            end
          elseif state == 'waiting' or policy == 'cancel' then
            -- (a parent still running with a child gone, policy cancel: stop it all)
            flow_end(d, dkey, now, policy, id, how)
          else
            -- its run ends it ('dependency failed') when it returns (complete.lua)
            redis.call('HSETNX', dkey, 'dep_failed', 'dependency ' .. id .. ' ended ' .. how)
          end
        end
      end
    end
  end
  FLOW_Q = {results = {}, budget = FLOW_Q.budget}
  notify(ready)
end

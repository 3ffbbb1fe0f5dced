--- @include "cfg_num"
-- A finished task's output stream gets an end entry ('end': the state it ended in), and
-- lives as long as the task: its retention (done_retention_s, or dead_retention_s), at
-- least a minute, so a reader blocked on it sees the end. `flag`: the task's 'output'
-- field, read by the caller with the fields it reads anyway: a task that never emitted
-- (and nobody streams) costs nothing here.
local function output_end(id, state, flag)
  if not flag then return end
  local out = K_OUTPUT .. id
  redis.call('XADD', out, '*', 'end', state)
  local retention = cfg_num(state == 'done' and 'done_retention_s' or 'dead_retention_s')
  redis.call('PEXPIRE', out, math.max(60000, math.floor(retention * 1000)))
end

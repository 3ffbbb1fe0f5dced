-- A claim record that hand_off (includes/hand_off.lua) pushed onto a wake list: its task's id and key,
-- and whether that incarnation still holds the task under the record's token (a task
-- taken back meanwhile is not its any more). Either form (claim.lua): a tagged record
-- as claim_tasks writes it (id, then token, first), or a positional one.
local function handed_task(rec, incarnation)
  local id, token = string.match(rec, '^\1' .. '3%zid%z(%Z*)%ztoken%z(%Z*)%z')
  if not id then id, token = string.match(rec, '^(%Z*)%z(%Z*)%z') end
  local key = K_TASK .. (id or '')
  local v = redis.call('HMGET', key, 'state', 'token', 'incarnation')
  return id, key, v[1] == 'running' and v[2] == token and v[3] == incarnation
end

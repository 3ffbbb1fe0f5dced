-- Is the task running under this claim token? Returns (holds, pod).
local function holds(key, token)
  local v = redis.call('HMGET', key, 'state', 'token', 'pod')
  return v[1] == 'running' and v[2] == token, v[3]
end


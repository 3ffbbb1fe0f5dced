--- @include "demand"
local NOTIFY_MAX = 16
-- Wake up to n idle workers blocked on BLPOP notify, and signal demand.
-- The list holds at most NOTIFY_MAX tokens: a full one (nobody blocked on it, the usual
-- case while workers are busy) costs one LLEN, not a push and a trim.
local function notify(n)
  if n <= 0 then return end
  local room = NOTIFY_MAX - redis.call('LLEN', K_NOTIFY)
  if n > room then n = room end
  if n > 0 then
    local tokens = {}
    for i = 1, n do tokens[i] = '1' end
    redis.call('LPUSH', K_NOTIFY, unpack(tokens))
  end
  demand()
end


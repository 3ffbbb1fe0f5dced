-- rate_note: this call's completions or failures in the queue's per-minute history
-- (K_RATE .. minute: a hash {completed, failed} the dashboard's charts read back an
-- hour). One HINCRBY a call; an EXPIRE only when it created the field (once a minute).
local RATE_KEEP_S = 3900  -- an hour of minutes, and a little more (as reads.RATE_MINUTES)
local function rate_note(now, field, n)
  if n <= 0 then return end
  local key = K_RATE .. math.floor(now / 60000)
  if redis.call('HINCRBY', key, field, n) == n then redis.call('EXPIRE', key, RATE_KEEP_S) end
end

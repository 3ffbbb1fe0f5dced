-- The queue's event stream (K_EVENTS), written while K_EVENTS_CAP holds its retention (a
-- number of entries; Queue.configure_events sets and deletes it). Each entry: event
-- <kind>, id <task id>, and attempt when the kind has one; trimmed near the retention
-- (XADD MAXLEN ~). While K_FOLLOWS is set (someone follows a task of the queue:
-- Queue.follow), a task whose follow stream K_FOLLOW..id exists gets the kind there too,
-- which wakes its followers. A queue nobody listens to or follows pays one MGET per call.
local EVENTS_CAP = nil
local FOLLOWED = false
-- Entries a follow stream keeps: its followers are only woken, then read the task.
local FOLLOW_MAX = 32
local function event(kind, id, attempt)
  if EVENTS_CAP == nil then
    local on = redis.call('MGET', K_EVENTS_CAP, K_FOLLOWS)
    EVENTS_CAP = tonumber(on[1]) or false
    FOLLOWED = on[2] ~= false
  end
  if FOLLOWED then
    local f = K_FOLLOW .. id
    if redis.call('EXISTS', f) == 1 then
      redis.call('XADD', f, 'MAXLEN', '~', FOLLOW_MAX, '*', 'event', kind)
    end
  end
  if not EVENTS_CAP then return end
  if attempt then
    redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'event', kind, 'id', id,
      'attempt', attempt)
  else
    redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'event', kind, 'id', id)
  end
end

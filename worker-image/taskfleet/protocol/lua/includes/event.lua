-- The queue's event stream (K_EVENTS), written while K_EVENTS_CAP holds its retention (a
-- number of entries; Queue.configure_events sets and deletes it): a queue nobody listens
-- to pays one GET per script call. Each entry: event <kind>, id <task id>, and attempt
-- when the kind has one; trimmed near the retention (XADD MAXLEN ~).
local EVENTS_CAP = nil
local function event(kind, id, attempt)
  if EVENTS_CAP == nil then EVENTS_CAP = tonumber(redis.call('GET', K_EVENTS_CAP)) or false end
  if not EVENTS_CAP then return end
  if attempt then
    redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'event', kind, 'id', id,
      'attempt', attempt)
  else
    redis.call('XADD', K_EVENTS, 'MAXLEN', '~', EVENTS_CAP, '*', 'event', kind, 'id', id)
  end
end

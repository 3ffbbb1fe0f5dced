-- pending score: higher priority first, FIFO inside a priority (enqueue sequence), and
-- "front" entries (released / taken back: they already waited) before the FIFO ones.
-- Priority is bounded to +-1000 so scores stay exact doubles.
local BAND = 1e12
local HALF = 5e11
local function pending_score(priority, front)
  local seq = redis.call('INCR', K_SEQ)
  if front then return -priority * BAND + HALF - seq end
  return -priority * BAND + HALF + seq
end


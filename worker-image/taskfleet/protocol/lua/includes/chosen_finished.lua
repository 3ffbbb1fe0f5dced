--- @include "finished_matching"
-- The finished tasks a retry or purge call names (ARGV[2] onwards): 'ids', then the ids;
-- or 'scan', then reason, lo, hi, offset and bound for finished_matching over zkey.
-- Returns the ids and the offset to go on from (-1: done).
local function chosen_finished(zkey)
  if ARGV[2] == 'scan' then
    return finished_matching(zkey, ARGV[3], ARGV[4], ARGV[5], tonumber(ARGV[6]),
      tonumber(ARGV[7]))
  end
  local ids = {}
  for i = 3, #ARGV do ids[#ids + 1] = ARGV[i] end
  return ids, -1
end

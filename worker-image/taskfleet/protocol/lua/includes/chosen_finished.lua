--- @include "finished_matching"
-- The finished tasks a retry or drop call names: mode 'ids', the `n` ids record(1..n)
-- returns; or mode 'scan', the filter (reason, lo, hi, offset, bound) for
-- finished_matching over zkey. Returns the ids and the offset to go on from (-1: done).
local function chosen_finished(zkey, mode, n, record, reason, lo, hi, offset, bound)
  if mode == 'scan' then
    return finished_matching(zkey, reason, lo, hi, offset, bound)
  end
  local ids = {}
  for i = 1, n do ids[i] = record(i) end
  return ids, -1
end

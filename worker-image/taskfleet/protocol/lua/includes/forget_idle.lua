-- The pod's incarnations other than keep ('' = all) get no more tasks handed over (see
-- includes/hand_off.lua). What was handed to them is held by them, so the caller takes
-- it back itself; a kept incarnation's claims drop others' leftovers from its wake list.
local function forget_idle(pod, keep)
  local prefix = pod .. '\0'
  for _, member in ipairs(redis.call('ZRANGE', K_IDLE, 0, -1)) do
    if string.sub(member, 1, #prefix) == prefix and member ~= prefix .. keep then
      redis.call('ZREM', K_IDLE, member)
    end
  end
  if keep == '' then redis.call('DEL', K_WAKE .. pod) end
end


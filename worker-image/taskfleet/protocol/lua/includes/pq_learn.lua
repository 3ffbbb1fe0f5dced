-- pq_learn: a run's first settlement moves its quota's scale per unit (see pq_scaled).
local PQ_SCALE_MAX = 100
-- quota q: `est` its raw estimate, `used` what it settled
local function pq_learn(q, est, used)
  local fields = {}
  for unit, amount in pairs(used) do
    local e, a = tonumber(est[unit]) or 0, tonumber(amount) or 0
    if e > 0 then
      local s = q.scale[unit] or 1
      local n = math.min(PQ_SCALE_MAX, math.max(1, (s + a / e) / 2))
      if n < 1.01 then n = 1 end
      if n ~= s then
        q.scale[unit] = n
        fields[#fields + 1] = 'scale:' .. unit
        fields[#fields + 1] = tostring(n)
      end
    end
  end
  if #fields > 0 then redis.call('HSET', q.key, unpack(fields)) end
end

-- Tell whoever watches the queue from outside (the autoscaler, the operator's sweep) that
-- it has new work: one element at most, so a burst signals once.
local function demand()
  if redis.call('LLEN', K_DEMAND) == 0 then redis.call('RPUSH', K_DEMAND, '1') end
end


-- redis.call(cmd, key, unpack(args)) for a list built up by a batch, in chunks (unpack
-- has a stack limit); an even chunk size keeps ZADD's score-member pairs together.
local function call_chunked(cmd, key, args)
  for i = 1, #args, 1000 do
    redis.call(cmd, key, unpack(args, i, math.min(i + 999, #args)))
  end
end


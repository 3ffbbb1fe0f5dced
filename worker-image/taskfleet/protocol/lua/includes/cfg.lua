local CONFIG = nil
local function cfg(name)
  if CONFIG == nil then
    CONFIG = {}
    local flat = redis.call('HGETALL', K_CONFIG)
    for i = 1, #flat, 2 do CONFIG[flat[i]] = flat[i + 1] end
  end
  local v = CONFIG[name]
  if v == nil or v == '' then v = DEFAULTS[name] end
  return v
end


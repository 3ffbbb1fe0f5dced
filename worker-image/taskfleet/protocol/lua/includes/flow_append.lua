-- Append `ids` (children a parent adopted in this call) to the parent's 'after' (a JSON
-- array) in one write, and mark it 'join': done only once they are (flow_join_done).
local function flow_append(pkey, ids)
  if #ids == 0 then return end
  local items = {}
  for i, id in ipairs(ids) do items[i] = cjson.encode(id) end
  local after = redis.call('HGET', pkey, 'after')
  if not after or after == '' or after == '[]' then
    after = '[' .. table.concat(items, ',') .. ']'
  else
    after = string.sub(after, 1, -2) .. ',' .. table.concat(items, ',') .. ']'
  end
  redis.call('HSET', pkey, 'after', after, 'join', 1)
end

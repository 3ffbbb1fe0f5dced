-- Whether an enqueue's `after` (JSON array text, '' = none) and `on_dep_fail` ('' =
-- 'fail') are those of the existing task at key: nil when they are, else 'after' or
-- 'on_dep_fail'. The ids compare in order; a task that added children at run time
-- ('join') has them appended to its 'after', so the enqueue's ids need only begin it.
-- on_dep_fail compares when the enqueue gives after (it is stored only with after).
local function same_after(key, after, on_dep_fail)
  local v = redis.call('HMGET', key, 'after', 'on_dep_fail', 'join')
  local stored, given = {}, {}
  if v[1] and v[1] ~= '' then
    local ok, ids = pcall(cjson.decode, v[1])
    if ok and type(ids) == 'table' then stored = ids end
  end
  if after ~= '' then given = cjson.decode(after) end
  if #given > #stored or (#given < #stored and not v[3]) then return 'after' end
  for i = 1, #given do
    if given[i] ~= stored[i] then return 'after' end
  end
  if after ~= '' then
    local had, asked = v[2] or '', on_dep_fail or ''
    if had == '' then had = 'fail' end
    if asked == '' then asked = 'fail' end
    if had ~= asked then return 'on_dep_fail' end
  end
  return nil
end

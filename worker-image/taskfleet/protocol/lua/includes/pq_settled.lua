-- pq_settled: what the run under `token` settled so far, by quota name, from the task's
-- 'quota_settled' field (`raw`, written by settle.lua); nil when that run settled nothing.
local function pq_settled(raw, token)
  if not raw then return nil end
  local ok, s = pcall(cjson.decode, raw)
  if ok and type(s) == 'table' and s.token == token and type(s.by) == 'table' then return s.by end
  return nil
end

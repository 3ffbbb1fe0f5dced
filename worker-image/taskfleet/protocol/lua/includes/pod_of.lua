-- The pod of a worker name: <pod>#<i> is process i of pod <pod> ('#' is never in a pod name).
local function pod_of(name)
  return string.match(name, '^([^#]*)#') or name
end

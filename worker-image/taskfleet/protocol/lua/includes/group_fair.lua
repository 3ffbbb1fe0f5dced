--- @include "cfg_num"
--- @include "group_join"
-- Fair claiming between groups (claim_tasks' pick while groups are in use). The ring
-- K_GROUPS holds every group with tasks a claim may take now, scored by its virtual time:
-- a claim serves the lowest, and a task it takes moves that group on by 1 / its weight, so
-- groups are served in turn (weighted round robin) whatever their backlog. With
-- K_GROUPS_FAIR set (a unit of provider quotas), a task moves it on by its estimate of that
-- unit / weight instead, and its settlement corrects that (group_took): fair by spend.
-- '' stands for
-- the ungrouped tasks (K_PENDING) while groups are in use. Inside a group the order is
-- pending's (priority, then FIFO). A group held back by its own limits leaves the ring for
-- K_GROUPS_PARKED (score: when to look again; +inf at its concurrency cap, until one of
-- its tasks leaves running: group_left). Each step is O(log groups); a call walks at most
-- `bound` empty or held-back groups.
-- group_fair: the state of one call's fair pick, or nil when no group is in use (then the
-- claim walks K_PENDING as it always did: one EXISTS is all groups cost a queue without),
-- or when every group with tasks is parked (paused, limited): the claim walks K_PENDING,
-- and an idle worker waits on its wake list as usual (a new task, a resume or a group's
-- task leaving running wakes it; its next claim brings back the groups due by then).
local function group_fair(now, bound)
  if redis.call('EXISTS', K_GROUPS, K_GROUPS_PARKED) == 0 then return nil end
  local due = redis.call('ZRANGEBYSCORE', K_GROUPS_PARKED, '-inf', now, 'LIMIT', 0, bound)
  for _, g in ipairs(due) do
    redis.call('ZREM', K_GROUPS_PARKED, g)
    if redis.call('EXISTS', K_GROUP_PENDING .. g) == 1 then group_join(g) end
  end
  if redis.call('EXISTS', K_GROUPS) == 0 then return nil end
  if redis.call('EXISTS', K_PENDING) == 1 then group_join('') end
  return {now = now, bound = bound, steps = 0, groups = {},
    period_ms = cfg_num('rate_limit_period_s') * 1000}
end

-- quota: an administrator's (or a handler's) say over the queue's claim pause and spend
-- budget, in the quota hash (K_QUOTA; includes/quota_*.lua).
-- Arguments: ARG_* (signatures.Quota). op:
--   'pause': nobody claims the queue's tasks for pause_ms ('' = the adaptive pause, as a
--     rate limit without a retry-after sets it), or longer if a pause already holds;
--     reason is shown with it (a provider that reported its quota spent, an operator);
--   'resume': the pause ends now and the adaptive streak is forgotten;
--   'budget': day_limit and month_limit: '' leaves it, 'default' drops the run-time
--     setting (the config's budget_day / budget_month apply again), an integer >= 0 sets
--     it (0: no budget for that period, whatever the config says).
--   group (optional): the same for that group alone, over its own quota fields (in its
--   hash K_GROUP .. group; 'default' budgets: the config's group_budget_*): a pause parks
--   the group out of the fair ring (group_pause), a resume or a budget change lets the
--   next claim look at it again (group_unpark).
--   task_id (optional, with pause and no group): the group of that task is paused, or the
--   queue when it has none (a handler reporting its provider's quota spent for its group,
--   without knowing the group's name).
--   reporter (optional, with pause): the worker whose handler reported its provider's
--   quota spent (report_quota); '' = a producer or the CLI.
-- A pause or a budget of a limit > 0 asked by a producer or the CLI (no reporter: a
-- reporting worker is of this release itself) is refused while a live worker older than
-- claim pauses and budgets serves the queue (older_worker): it would go on claiming
-- through the pause and past the budget.
-- Returns: {until (ms; 0 = no pause), streak}; or {-6, pod, feature} (feature 'claim
--   pauses' or 'spend budgets') when refused, nothing changed.
--- @include "now_ms"
--- @include "flush_counts"
--- @include "quota_pause"
--- @include "group_pause"
--- @include "group_unpark"
--- @include "older_worker"
local now = now_ms()
local op = ARG_OP
local g = ARG_GROUP or ''
if g == '' and op == 'pause' and (ARG_TASK_ID or '') ~= '' then
  g = redis.call('HGET', K_TASK .. ARG_TASK_ID, 'group') or ''
end
local key = g ~= '' and K_GROUP .. g or K_QUOTA
local feature = nil
if op == 'pause' and ARG_REPORTER == '' then
  feature = 'claim pauses'
elseif op == 'budget' and ((tonumber(ARG_DAY_LIMIT) or 0) > 0
    or (tonumber(ARG_MONTH_LIMIT) or 0) > 0) then
  feature = 'spend budgets'
end
if feature then
  local pod = older_worker(now)
  if pod then return {-6, pod, feature} end
end
if op == 'pause' then
  local till = quota_pause(key, now, tonumber(ARG_PAUSE_MS), ARG_REASON)
  if g ~= '' then group_pause(g, till) end
elseif op == 'resume' then
  local q = quota_state(key, now)
  q.till, q.streak = 0, 0
  if redis.call('EXISTS', key) == 1 then
    redis.call('HSET', key, 'until', 0, 'streak', 0)
  end
  if g ~= '' then group_unpark(g, now) end
elseif op == 'budget' then
  for field, value in pairs({day_limit = ARG_DAY_LIMIT, month_limit = ARG_MONTH_LIMIT}) do
    if value == 'default' then
      redis.call('HDEL', key, field)
    elseif value ~= '' then
      redis.call('HSET', key, field, value)
    end
  end
  if g ~= '' then group_unpark(g, now) end
end
flush_counts()
local q = quota_state(key, now)
return {q.till, q.streak}

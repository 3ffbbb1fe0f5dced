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
-- Returns: {until (ms; 0 = no pause), streak}.
--- @include "now_ms"
--- @include "flush_counts"
--- @include "quota_pause"
local now = now_ms()
local op = ARG_OP
if op == 'pause' then
  quota_pause(K_QUOTA, now, tonumber(ARG_PAUSE_MS), ARG_REASON)
elseif op == 'resume' then
  local q = quota_state(K_QUOTA, now)
  q.till, q.streak = 0, 0
  if redis.call('EXISTS', K_QUOTA) == 1 then
    redis.call('HSET', K_QUOTA, 'until', 0, 'streak', 0)
  end
elseif op == 'budget' then
  for field, value in pairs({day_limit = ARG_DAY_LIMIT, month_limit = ARG_MONTH_LIMIT}) do
    if value == 'default' then
      redis.call('HDEL', K_QUOTA, field)
    elseif value ~= '' then
      redis.call('HSET', K_QUOTA, field, value)
    end
  end
end
flush_counts()
local q = quota_state(K_QUOTA, now)
return {q.till, q.streak}

-- Tasks that finished in this call and have dependants (tasks waiting on them, the set
-- dependants:<id>): entries '<outcome><id>', outcome 'd' done, 'x' dead, 'c' cancelled.
-- flush_counts resolves them (flow_resolve) before the script returns. FLOW_Q.results:
-- the result of a task completed in this call, by id (handed to its dependants).
local FLOW_Q = {results = {}}

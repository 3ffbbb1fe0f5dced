-- Counters are summed locally and written once per call (flush_counts) to keep batch
-- scripts cheap. Every script calls flush_counts() before it returns.
local COUNTS = {}

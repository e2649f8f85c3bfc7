-- quarantine: an operator's kill switch (docs/semantics.md, Quarantine). Works
-- for a job the store never saw.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index.
-- ARGV: shard prefix, job, by, reason.
-- Returns 1.
local k = declared_keys(ARGV[1], ARGV[2])
quarantine(k, ARGV[2], now_us(), ARGV[3], ARGV[4], ARGV[3], '')
return 1

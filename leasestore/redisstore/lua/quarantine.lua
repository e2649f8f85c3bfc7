-- quarantine: an operator's kill switch (docs/semantics.md, Quarantine). Works
-- for a job the store never saw.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, by, reason.
-- Returns 1.
local k = declared_keys(ARGV[1], ARGV[2])
local last = redis.call('HMGET', k.r, 'lh', 'lo')
quarantine(k, ARGV[2], now_us(), ARGV[3], ARGV[4], ARGV[3], '', last[1] or '', last[2] or '')
return 1

-- counts: the gauges of one shard (docs/semantics.md, Counts). Read-only.
-- KEYS: the shard's index, quarantine set, known jobs, due index.
-- Returns {live leases, quarantined jobs}.
local now = now_us()
return {redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf'), redis.call('SCARD', KEYS[2])}

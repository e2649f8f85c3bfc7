-- counts: store-wide gauges (semantics.md, Counts). Read-only.
-- KEYS: index, quarantine set.
-- Returns {live leases, quarantined jobs}.
local now = now_us()
return {redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf'), redis.call('SCARD', KEYS[2])}

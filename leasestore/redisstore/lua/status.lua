-- status: read one job's state (docs/semantics.md, Status). Read-only.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index.
-- ARGV: shard prefix, job.
-- Returns {now, evidence or '', index score or '', {record field, value,
--          ...}, {history event, ...}}.
local job = ARGV[2]
local k = declared_keys(ARGV[1], job)
local now = now_us()
local _, score = liveness(k, job, now)
return {int(now), redis.call('GET', k.e) or '', score or '',
        redis.call('HGETALL', k.r), redis.call('LRANGE', k.h, 0, -1)}

-- unquarantine: let a quarantined job run again (semantics.md,
-- ReleaseQuarantine).
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, by, reason.
-- Returns 1 when released; 0 when the job was not quarantined.
local job, by, reason = ARGV[2], ARGV[3], ARGV[4]
local k = declared_keys(ARGV[1], job)
if redis.call('HEXISTS', k.r, 'q') == 0 then
  return 0
end
redis.call('HDEL', k.r, 'q', 'qr', 'qb', 'qc', 'ql', 'qo')
redis.call('HSET', k.r, 'c', '0')
redis.call('SREM', k.qs, job)
local now = now_us()
event(k, now, 'u', by, '', 'by ' .. by .. ': ' .. reason)
redis.call('PUBLISH', k.n, 'u')
wake_waiters(k, job, now)
return 1

-- stop: an operator's request that the job's running child stop
-- (docs/semantics.md, Stop). The holder's next renew.lua returns it.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index.
-- ARGV: shard prefix, job, by, reason.
-- Returns 1 when the request is recorded; 0 when no run is live.
local job, by, reason = ARGV[2], ARGV[3], ARGV[4]
local k = declared_keys(ARGV[1], job)
local now = now_us()
local held = redis.call('GET', k.e)
if not held or not liveness(k, job, now) then
  return 0
end
local token = split(held)[2]
redis.call('HSET', k.r, 'sp', token, 'sb', by, 'sr', reason, 'sa', int(now))
event(k, now, 'p', by, token, 'by ' .. by .. ': ' .. reason)
return 1

-- leases: list the live leases of one shard (docs/semantics.md, Leases).
-- Read-only. It reaches each job's evidence by name, in the shard's slot.
-- KEYS: the shard's index, quarantine set, known jobs, due index.
-- ARGV: shard prefix.
-- Returns {now, then per live lease: job, evidence, liveness expiry, the
-- holder's last renewal round trip (us) or '', and an operator's stop
-- request (stop.lua) as by, reason, at (us), or '', '', ''}.
local prefix = ARGV[1]
local now = now_us()
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(now), '+inf', 'WITHSCORES')
local out = {int(now)}
for i = 1, #live, 2 do
  local k = job_keys(prefix, live[i])
  local ev = redis.call('GET', k.e)
  if ev then
    out[#out + 1] = live[i]
    out[#out + 1] = ev
    out[#out + 1] = live[i + 1]
    out[#out + 1] = redis.call('HGET', k.r, 'rt') or ''
    local stop = stop_of(k, split(ev)[2]) or {'', '', ''}
    for j = 1, 3 do out[#out + 1] = stop[j] end
  end
end
return out

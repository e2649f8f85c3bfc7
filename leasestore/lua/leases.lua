-- leases: list the live leases (semantics.md, Leases). Read-only. It
-- reaches each job's evidence by name, which a single Redis allows.
-- KEYS: index.
-- ARGV: namespace.
-- Returns {now, then per live lease: job, evidence, liveness expiry}.
local ns = ARGV[1]
local now = now_us()
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(now), '+inf', 'WITHSCORES')
local out = {int(now)}
for i = 1, #live, 2 do
  local ev = redis.call('GET', job_keys(ns, live[i]).e)
  if ev then
    out[#out + 1] = live[i]
    out[#out + 1] = ev
    out[#out + 1] = live[i + 1]
  end
end
return out

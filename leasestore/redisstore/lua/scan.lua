-- scan: count the crashes of up to LIMIT jobs whose liveness expired
-- (docs/semantics.md, Scan). The index is sorted by liveness expiry, so the cost
-- follows the expired entries, not all jobs. It reaches each job's keys by
-- name, which a single Redis allows; Redis Cluster support would have to
-- move the index and run this per job.
-- KEYS: index, quarantine set, known jobs, due index.
-- ARGV: shard prefix, limit.
-- Returns {now, expired entries examined, then per counted crash: job,
--          evidence, stale since, crashes, quarantined 0/1}. Entries whose
-- evidence is gone (expired) are dropped from the index without counting.
local prefix, limit = ARGV[1], ARGV[2]
local now = now_us()
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now), 'WITHSCORES', 'LIMIT', 0, limit)
local out = {int(now), int(#expired / 2)}
for i = 1, #expired, 2 do
  local job, score = expired[i], expired[i + 1]
  local k = job_keys(prefix, job)
  local ev = redis.call('GET', k.e)
  if ev then
    local crashes, quarantined = consume_crash(k, job, split(ev), now, 'supervisor vanished: liveness expired, found by scan')
    out[#out + 1] = job
    out[#out + 1] = ev
    out[#out + 1] = score
    out[#out + 1] = int(crashes)
    out[#out + 1] = int(quarantined)
  else
    redis.call('ZREM', KEYS[1], job)
  end
end
return out

-- scan: count the crashes of the jobs with up to LIMIT runs whose liveness
-- expired (docs/semantics.md, Scan; package rules, Reap). The indexes are
-- sorted by liveness expiry, so the cost follows the expired entries, not
-- all jobs. It reaches each job's keys by name, in the shard's slot.
-- KEYS: index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, limit.
-- Returns {now, expired entries examined (of the index or of the slots
-- index, whichever had more), then per counted crash: job, evidence, stale
-- since, crashes, quarantined 0/1}. Each job with an expired entry is
-- reaped whole, its runs by slot, as the rules reap it; entries whose
-- evidence is gone (expired) are dropped from the indexes without
-- counting.
local prefix, limit = ARGV[1], ARGV[2]
local now = now_us()
local expired = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', int(now), 'LIMIT', 0, limit)
local extra = redis.call('ZRANGEBYSCORE', KEYS[5], '-inf', int(now), 'LIMIT', 0, limit)
local out = {int(now), int(math.max(#expired, #extra))}
local jobs, seen = {}, {}
local function note(job)
  if not seen[job] then
    seen[job] = true
    jobs[#jobs + 1] = job
  end
end
for _, job in ipairs(expired) do
  note(job)
end
for _, member in ipairs(extra) do
  note(split(member)[1])
end
for _, job in ipairs(jobs) do
  local k = job_keys(prefix, job)
  for _, u in ipairs(runs_of(k, job, now)) do
    if not u.live then
      local crashes, quarantined = consume_crash(k, job, u, now, 'supervisor vanished: liveness expired, found by scan')
      out[#out + 1] = job
      out[#out + 1] = u.raw
      out[#out + 1] = stale_since(u)
      out[#out + 1] = int(crashes)
      out[#out + 1] = int(quarantined)
    end
  end
end
-- What is left expired has no evidence any more.
for _, job in ipairs(expired) do
  local score = redis.call('ZSCORE', KEYS[1], job)
  if score and tonumber(score) <= now then
    redis.call('ZREM', KEYS[1], job)
  end
end
for _, member in ipairs(extra) do
  local score = redis.call('ZSCORE', KEYS[5], member)
  if score and tonumber(score) <= now then
    redis.call('ZREM', KEYS[5], member)
  end
end
return out

-- leases: list the live leases of one shard (docs/semantics.md, Leases),
-- one per live run. Read-only. It reaches each job's evidence by name, in
-- the shard's slot.
-- KEYS: the shard's index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix.
-- Returns {now, then per live lease: job, slot, evidence, liveness expiry,
-- the holder's last renewal round trip (us) or '', and an operator's stop
-- request (stop.lua) as by, reason, at (us), or '', '', ''}.
local prefix = ARGV[1]
local now = now_us()
local out = {int(now)}
local function add(job, slot, score)
  local k = job_keys(prefix, job)
  local ev = redis.call('GET', ev_key(k, slot))
  if ev then
    out[#out + 1] = job
    out[#out + 1] = int(slot)
    out[#out + 1] = ev
    out[#out + 1] = score
    out[#out + 1] = redis.call('HGET', k.r, fld('rt', slot)) or ''
    local stop = stop_of(k, slot, split(ev)[2]) or {'', '', ''}
    for j = 1, 3 do out[#out + 1] = stop[j] end
  end
end
local live = redis.call('ZRANGEBYSCORE', KEYS[1], '(' .. int(now), '+inf', 'WITHSCORES')
for i = 1, #live, 2 do
  add(live[i], 0, live[i + 1])
end
local extra = redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. int(now), '+inf', 'WITHSCORES')
for i = 1, #extra, 2 do
  local m = split(extra[i])
  add(m[1], tonumber(m[2]), extra[i + 1])
end
return out

-- counts: the gauges of one shard (docs/semantics.md, Counts). Read-only.
-- KEYS: the shard's index, quarantine set, known jobs, due index, slots index.
-- Returns {jobs with a live run, quarantined jobs}. A job counts once
-- however many of its slots run: by its run in slot 0, or else by its
-- first live run in another slot.
local now = now_us()
local live = redis.call('ZCOUNT', KEYS[1], '(' .. int(now), '+inf')
local seen = {}
for _, member in ipairs(redis.call('ZRANGEBYSCORE', KEYS[5], '(' .. int(now), '+inf')) do
  local job = split(member)[1]
  if not seen[job] then
    seen[job] = true
    local score = redis.call('ZSCORE', KEYS[1], job)
    if not score or tonumber(score) <= now then
      live = live + 1
    end
  end
end
return {live, redis.call('SCARD', KEYS[2])}

-- overdue: the shard's jobs past their expectation (docs/semantics.md,
-- Overdue). Read-only: it reads the due index up to now and the records of
-- the jobs it names, so its cost follows the overdue jobs.
-- KEYS: the shard's index, quarantine set, known jobs.
-- ARGV: shard prefix.
-- Returns {now, then per job: job, every, grace, since, last success or
-- ''}: times in microseconds since the Unix epoch, durations in
-- microseconds.
local prefix = ARGV[1]
local now = now_us()
local out = {int(now)}
for _, job in ipairs(redis.call('ZRANGEBYSCORE', prefix .. 'due', '-inf', '(' .. int(now))) do
  local x = redis.call('HMGET', prefix .. job .. ':r', 'xe', 'xg', 'xs', 's')
  out[#out + 1] = job
  for i = 1, 4 do
    out[#out + 1] = x[i] or ''
  end
end
return out

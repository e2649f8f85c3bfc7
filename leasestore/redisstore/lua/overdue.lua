-- overdue: the shard's jobs past their expectation (docs/semantics.md,
-- Overdue). Read-only: it reads the due index up to now and the records of
-- the jobs it names, so its cost follows the overdue jobs.
-- KEYS: the shard's index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix.
-- Returns {now, then per job: job, every, grace, since, last success or
-- ''}: times in microseconds since the Unix epoch, durations in
-- microseconds.
local prefix = ARGV[1]
local now = now_us()
local out = {int(now)}
for _, job in ipairs(redis.call('ZRANGEBYSCORE', KEYS[4], '-inf', '(' .. int(now))) do
  local x = redis.call('HMGET', prefix .. job .. ':r', 'xe', 'xg', 'xs', 's')
  -- The record decides: an entry a script left behind the record (none
  -- should) lists the job only once the record says it is due.
  if x[1] and tonumber(x[4] or x[3]) + tonumber(x[1]) + tonumber(x[2]) < now then
    out[#out + 1] = job
    for i = 1, 4 do
      out[#out + 1] = x[i] or ''
    end
  end
end
return out

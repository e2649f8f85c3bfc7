-- expect: set or clear the job's expectation by an operator's decision
-- (docs/semantics.md, Expect).
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, every (us; '' clears), grace (us), by, history
--       detail.
-- Returns 1 when recorded; 0 when clearing a job without an expectation
-- (nothing changed).
local job, every, grace, by, detail = ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
local k = declared_keys(ARGV[1], job)
local now = now_us()
if every == '' then
  if redis.call('HEXISTS', k.r, 'xe') == 0 then
    return 0
  end
  redis.call('HDEL', k.r, 'xe', 'xg', 'xs')
  set_due(k, job)
else
  expect(k, job, now, every, grace)
  redis.call('ZADD', k.jobs, 0, job)
end
event(k, now, 'e', by, '', detail)
return 1

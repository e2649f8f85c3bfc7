-- checktoken: is a fencing token still current (docs/semantics.md, CheckToken)?
-- Read-only.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index.
-- ARGV: shard prefix, job.
-- Returns {last token or '0', 1 when its lease is live else 0}.
local job = ARGV[2]
local k = declared_keys(ARGV[1], job)
local last = redis.call('HGET', k.r, 't') or '0'
local live = 0
local ev = redis.call('GET', k.e)
if ev and split(ev)[2] == last and liveness(k, job, now_us()) then
  live = 1
end
return {last, live}

-- status: read one job's state (docs/semantics.md, Status). Read-only.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job.
-- Returns {now, {per run with evidence, by slot: slot, evidence, index
--          score or ''}, {record field, value, ...}, {history event, ...},
--          {packed waiter, ...}}.
local job = ARGV[2]
local k = declared_keys(ARGV[1], job)
local now = now_us()
local runs = {}
for _, u in ipairs(runs_of(k, job, now)) do
  runs[#runs + 1] = int(u.slot)
  runs[#runs + 1] = u.raw
  runs[#runs + 1] = u.score or ''
end
return {int(now), runs, redis.call('HGETALL', k.r), redis.call('LRANGE', k.h, 0, -1),
        redis.call('LRANGE', k.q, 0, -1)}

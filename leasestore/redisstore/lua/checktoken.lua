-- checktoken: is a fencing token still current (docs/semantics.md,
-- CheckToken)? Read-only.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, token ('0': none, for a token feed's read).
-- Returns {last token or '0', 1 when its run is live else 0, 1 when a live
-- run has the token else 0, the job's slots}.
local job, token = ARGV[2], ARGV[3]
local k = declared_keys(ARGV[1], job)
local now = now_us()
local last = redis.call('HGET', k.r, 't') or '0'
local last_live, mine = 0, 0
for _, u in ipairs(runs_of(k, job, now)) do
  if u.live and u.f[2] == last then
    last_live = 1
  end
  if u.live and u.f[2] == token then
    mine = 1
  end
end
return {last, last_live, mine, slots_of(k)}

-- stop: an operator's request that the job's running children stop
-- (docs/semantics.md, Stop), one per live run, by slot. Each holder's next
-- renew.lua returns it.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, by, reason.
-- Returns the number of runs asked to stop; 0 when no run is live.
local job, by, reason = ARGV[2], ARGV[3], ARGV[4]
local k = declared_keys(ARGV[1], job)
local now = now_us()
local asked = 0
for _, u in ipairs(runs_of(k, job, now)) do
  if u.live then
    local token = u.f[2]
    redis.call('HSET', k.r, fld('sp', u.slot), token, fld('sb', u.slot), by, fld('sr', u.slot), reason,
      fld('sa', u.slot), int(now))
    event(k, now, 'p', by, token, 'by ' .. by .. ': ' .. reason)
    asked = asked + 1
  end
end
return asked

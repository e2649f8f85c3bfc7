-- quarantined: list the quarantined jobs of one shard (docs/semantics.md,
-- Quarantined). Read-only. It reaches each job's record by name, in the
-- shard's slot.
-- KEYS: the shard's index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix.
-- Returns per quarantined job: job, since, reason, by, crashes, last
-- holder, last host.
local out = {}
for _, job in ipairs(redis.call('SMEMBERS', KEYS[2])) do
  local r = redis.call('HMGET', job_keys(ARGV[1], job).r, 'q', 'qr', 'qb', 'qc', 'ql', 'qo', 'lh', 'lo')
  if r[1] then
    out[#out + 1] = job
    for i = 1, 4 do out[#out + 1] = r[i] or '' end
    -- A quarantine a leasectl older than slots made names lh/lo.
    out[#out + 1] = r[5] or r[7] or ''
    out[#out + 1] = r[6] or r[8] or ''
  end
end
return out

-- jobs: list the known jobs of one shard whose IDs start with a prefix
-- (docs/semantics.md, Jobs), in lexical order. Read-only.
-- KEYS: the shard's index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job ID prefix, at most this many (0: all).
-- Returns the job IDs.
local prefix, limit = ARGV[2], tonumber(ARGV[3])
local from, to = '-', '+'
if prefix ~= '' then
  -- Job IDs are ASCII: every ID that starts with prefix sorts below
  -- prefix followed by byte 255.
  from, to = '[' .. prefix, '(' .. prefix .. '\255'
end
if limit > 0 then
  return redis.call('ZRANGEBYLEX', KEYS[3], from, to, 'LIMIT', 0, limit)
end
return redis.call('ZRANGEBYLEX', KEYS[3], from, to)

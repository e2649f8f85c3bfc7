-- noticeswap: a notice's record replaced if it is still what its writer
-- read (leasestore/noticebook, Shelf.Swap): the compare-and-swap the rules
-- of notices are written over.
-- KEYS: the notices hash.
-- ARGV: the notice's key, the record read, the new record ("" deletes it).
-- Returns 1 when it swapped; 0 when the record changed or is gone.
local now = redis.call('HGET', KEYS[1], ARGV[1])
if not now or now ~= ARGV[2] then
  return 0
end
if ARGV[3] == '' then
  redis.call('HDEL', KEYS[1], ARGV[1])
else
  redis.call('HSET', KEYS[1], ARGV[1], ARGV[3])
end
return 1

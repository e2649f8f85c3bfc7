-- leave: take a waiter out of the job's queue when it gives up waiting
-- (docs/semantics.md, Leave; package rules, Leave). When it
-- leaves while a slot is free, the job's channel says so ('w') and the
-- waiters whose turn it now is are woken: the slot may be theirs.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, holder.
-- Returns 1 when the holder was in the queue, else 0.
local job, holder = ARGV[2], ARGV[3]
local k = declared_keys(ARGV[1], job)
local now = now_us()
local left = unqueue(k, holder)
if left then
  left_queue(k, job, now)
end
prune(k, queue_of(k), now)
if left then
  return 1
end
return 0

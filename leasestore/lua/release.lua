-- release: end a run with its outcome (semantics.md, Release).
-- KEYS: evidence, record, history, index, quarantine set.
-- ARGV: namespace, job, token, worker, result, exit code, signal,
--       duration (ns), reason, history detail.
-- Returns 1 when released; 0 when the token is not current or the evidence
-- is gone (lease lost; nothing changed).
local ns, job, token, worker = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local result, detail = ARGV[5], ARGV[10]
local k = declared_keys(ns, job)
local f = evidence_of(k, token)
if not f then
  return 0
end
local now = now_us()
redis.call('HSET', k.r, 'o', result, 'oe', ARGV[6], 'og', ARGV[7], 'od', ARGV[8],
  'or', ARGV[9], 'ow', worker, 'ot', token, 'of', int(now))
if result == 'crashed' then
  consume_crash(k, job, f, now, detail)
  return 1
end
if result == 'completed' then
  redis.call('HSET', k.r, 'c', '0', 's', int(now))
end
redis.call('DEL', k.e)
redis.call('ZREM', k.idx, job)
event(k, now, 'r', worker, token, detail)
redis.call('PUBLISH', k.n, '')
return 1

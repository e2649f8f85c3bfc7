-- renew: extend a live lease (docs/semantics.md, Renew).
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, holder, token, ttl (ms), the holder's last
--       renewal round trip (us; 0: not measured), kept in the record as
--       rt (of its slot), the lease's slot (where its run is looked for
--       first).
-- Returns {1} when renewed, {1, by, reason, at} when renewed and an
-- operator asked the run to stop (stop.lua); {0} when the lease is lost
-- (then, if the run's evidence with this token and holder is still there,
-- a lease-lost event is recorded).
local prefix, job, holder, token, ttl = ARGV[1], ARGV[2], ARGV[3], ARGV[4], tonumber(ARGV[5])
local k = declared_keys(prefix, job)
local now = now_us()
local u = run_of(k, job, token, tonumber(ARGV[7]), now)
if not u or u.f[1] ~= holder then
  return {0}
end
if u.live then
  local key, member = index_of(k, job, u.slot)
  redis.call('ZADD', key, now + ttl * 1000, member)
  redis.call('PEXPIRE', ev_key(k, u.slot), u.f[4])
  if tonumber(ARGV[6]) > 0 then
    redis.call('HSET', k.r, fld('rt', u.slot), ARGV[6])
  end
  local stop = stop_of(k, u.slot, token)
  if stop then
    return {1, stop[1], stop[2], stop[3]}
  end
  return {1}
end
event(k, now, 'l', holder, token, 'renewal came after the lease expired')
return {0}

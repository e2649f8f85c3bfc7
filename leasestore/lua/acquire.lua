-- acquire: grant the job's lease (semantics.md, Acquire) in one step.
-- KEYS: evidence, record, history, index, quarantine set.
-- ARGV: namespace, job, holder, ttl (ms), evidence ttl (ms), max crashes,
--       min interval (us, 0: off), host, pid, command arguments packed with
--       NUL (may be empty; sent with a leading NUL when non-empty).
-- Returns one of:
--   {'held', now, evidence, liveness expiry}
--   {'quarantined', now, since, reason, by, crashes, last holder, last host}
--   {'toosoon', now, last success}
--   {'ok', now, token, attempt, recovered evidence or '', its stale since,
--    crashes, quarantined 0/1}
-- Times are microseconds since the Unix epoch, as decimal strings.
local ns, job, holder = ARGV[1], ARGV[2], ARGV[3]
local ttl, evidence_ttl, max_crashes = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local min_interval = tonumber(ARGV[7])
local host, pid, command = ARGV[8], ARGV[9], ARGV[10]
local k = declared_keys(ns, job)
local now = now_us()

local function refuse_quarantined()
  local r = redis.call('HMGET', k.r, 'q', 'qr', 'qb', 'qc', 'lh', 'lo')
  for i = 1, 6 do r[i] = r[i] or '' end
  return {'quarantined', int(now), r[1], r[2], r[3], r[4], r[5], r[6]}
end

if redis.call('HEXISTS', k.r, 'q') == 1 then
  return refuse_quarantined()
end

local rec_ev, rec_stale, rec_crashes, rec_q = '', '', '0', '0'
local ev = redis.call('GET', k.e)
if ev then
  local live, score = liveness(k, job, now)
  if live then
    return {'held', int(now), ev, score}
  end
  local f = split(ev)
  local crashes, quarantined = consume_crash(k, job, f, now, 'supervisor vanished: liveness expired, found by acquire')
  if quarantined == 1 then
    return refuse_quarantined()
  end
  rec_ev, rec_stale, rec_crashes, rec_q = ev, score or int(tonumber(f[2]) - tonumber(f[3], 36)), int(crashes), int(quarantined)
end

if min_interval > 0 then
  local success = redis.call('HGET', k.r, 's')
  if success and now - tonumber(success) < min_interval then
    return {'toosoon', int(now), success}
  end
end

local last = tonumber(redis.call('HGET', k.r, 't') or '0')
local token = int(math.max(last + 1, now))
local attempt = int(redis.call('HINCRBY', k.r, 'a', 1))
redis.call('HSET', k.r, 't', token, 'm', max_crashes, 'lh', holder, 'lo', host)
redis.call('SET', k.e, holder .. SEP .. token .. SEP .. b36(tonumber(token) - now) .. SEP .. evidence_ttl .. SEP ..
  max_crashes .. SEP .. attempt .. SEP .. int(ttl) .. SEP .. host .. SEP .. pid .. command,
  'PX', evidence_ttl)
redis.call('ZADD', k.idx, now + ttl * 1000, job)
-- The detail leaves out host and pid: the evidence has them while the run
-- lasts, and the default worker ID (host:pid:random) keeps them in every
-- event; 20 copies would take a tenth of a job's memory at rest.
event(k, now, 'a', holder, token, 'attempt ' .. attempt)
return {'ok', int(now), token, attempt, rec_ev, rec_stale, rec_crashes, rec_q}

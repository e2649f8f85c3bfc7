-- acquire: grant the job's lease (docs/semantics.md, Acquire) in one step.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index.
-- ARGV: shard prefix, job, holder, ttl (ms), evidence ttl (ms), max crashes,
--       min interval (us, 0: off), host, pid, command arguments packed with
--       NUL (may be empty; sent with a leading NUL when non-empty), region
--       ('' : none), deadline (us, 0: none), expectation every (us, '': none)
--       and grace (us).
-- An Acquire by the holder of the job's live lease returns that lease,
-- renewed ('ok' with its token and attempt), and changes nothing else.
-- Returns one of:
--   {'abandoned', now}: the holder gave up on its grant (recordlate.lua)
--   {'held', now, evidence, liveness expiry}
--   {'quarantined', now, since, reason, by, crashes, last holder, last host}
--   {'region', now, the job's region}
--   {'deadline', now}
--   {'toosoon', now, last success}
--   {'ok', now, token, attempt, recovered evidence or '', its stale since,
--    crashes, quarantined 0/1}
-- Times are microseconds since the Unix epoch, as decimal strings.
local prefix, job, holder = ARGV[1], ARGV[2], ARGV[3]
local ttl, evidence_ttl, max_crashes = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local min_interval = tonumber(ARGV[7])
local host, pid, command = ARGV[8], ARGV[9], ARGV[10]
local region, deadline = ARGV[11], tonumber(ARGV[12])
local expect_every, expect_grace = ARGV[13], ARGV[14]
local k = declared_keys(prefix, job)
local now = now_us()

-- A holder that gave up on its grant (recordlate.lua): its request came
-- late.
if redis.call('HGET', k.r, 'ab') == holder then
  return {'abandoned', int(now)}
end

-- Asked again by the holder of the live lease (its first answer was lost):
-- the same lease, renewed as renew.lua would.
local held = redis.call('GET', k.e)
if held then
  local f = split(held)
  if f[1] == holder and liveness(k, job, now) then
    redis.call('ZADD', k.idx, now + ttl * 1000, job)
    redis.call('PEXPIRE', k.e, f[4])
    return {'ok', int(now), f[2], f[6], '', '', '0', '0'}
  end
end

local function refuse_quarantined()
  local r = redis.call('HMGET', k.r, 'q', 'qr', 'qb', 'qc', 'lh', 'lo')
  for i = 1, 6 do r[i] = r[i] or '' end
  return {'quarantined', int(now), r[1], r[2], r[3], r[4], r[5], r[6]}
end

if redis.call('HEXISTS', k.r, 'q') == 1 then
  return refuse_quarantined()
end

local job_region = redis.call('HGET', k.r, 'g')
if region ~= '' and job_region and job_region ~= region then
  return {'region', int(now), job_region}
end

local rec_ev, rec_stale, rec_crashes, rec_q = '', '', '0', '0'
local ev = held
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

if deadline > 0 and now > deadline then
  return {'deadline', int(now)}
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
-- The round trip renew.lua keeps is the holder's, and a stop request
-- (stop.lua) the run's: a new one has neither yet.
redis.call('HDEL', k.r, 'rt', 'sp', 'sb', 'sr', 'sa')
if region ~= '' and not job_region then
  redis.call('HSET', k.r, 'g', region)
end
if expect_every ~= '' then
  expect(k, job, now, expect_every, expect_grace)
end
redis.call('SET', k.e, holder .. SEP .. token .. SEP .. b36(tonumber(token) - now) .. SEP .. evidence_ttl .. SEP ..
  max_crashes .. SEP .. attempt .. SEP .. int(ttl) .. SEP .. host .. SEP .. pid .. command,
  'PX', evidence_ttl)
redis.call('ZADD', k.idx, now + ttl * 1000, job)
redis.call('ZADD', k.jobs, 0, job)
-- The detail leaves out host and pid: the evidence has them while the run
-- lasts, and the default worker ID (host:pid:random) keeps them in every
-- event; 20 copies would take a tenth of a job's memory at rest.
event(k, now, 'a', holder, token, 'attempt ' .. attempt)
-- For token feeds (write-through fencing caches): waiters ignore it.
redis.call('PUBLISH', k.n, 'g' .. token)
return {'ok', int(now), token, attempt, rec_ev, rec_stale, rec_crashes, rec_q}

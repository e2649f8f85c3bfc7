-- acquire: grant the job's lease (docs/semantics.md, Acquire) in one step.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, holder, ttl (ms), evidence ttl (ms), max crashes,
--       min interval (us, 0: off), host, pid, command arguments packed with
--       NUL (may be empty; sent with a leading NUL when non-empty), region
--       ('' : none), deadline (us, 0: none), expectation every (us, '': none)
--       and grace (us), slots (at least 1), '1' when the request waits.
-- The steps and their order are the rules' (package rules, Acquire). An
-- Acquire by the holder of a live run returns that run's lease, renewed
-- ('ok' with its token, attempt and slot), and changes nothing else. A
-- refusal other than 'held' takes the holder out of the queue.
-- Returns one of:
--   {'abandoned', now}: the holder gave up on its grant (recordlate.lua)
--   {'held', now, evidence of the live run whose liveness expires first
--    or '' when a slot is free but promised to earlier waiters, its
--    liveness expiry or '', the job's slots, the holder's position in the
--    queue (0: it does not wait), waiters}
--   {'slots', now, the job's slots}: the runs in flight have another number
--   {'quarantined', now, since, reason, by, crashes, last holder, last host}
--   {'region', now, the job's region}
--   {'deadline', now}
--   {'toosoon', now, last success}
--   {'ok', now, token, attempt, recovered evidence or '', its stale since,
--    crashes, quarantined 0/1, slot}
-- Times are microseconds since the Unix epoch, as decimal strings.
local prefix, job, holder = ARGV[1], ARGV[2], ARGV[3]
local ttl, evidence_ttl, max_crashes = tonumber(ARGV[4]), ARGV[5], ARGV[6]
local min_interval = tonumber(ARGV[7])
local host, pid, command = ARGV[8], ARGV[9], ARGV[10]
local region, deadline = ARGV[11], tonumber(ARGV[12])
local expect_every, expect_grace = ARGV[13], ARGV[14]
local slots, waits = tonumber(ARGV[15]), ARGV[16] == '1'
local k = declared_keys(prefix, job)
local now = now_us()

-- A waiter refused leaves the queue; the next waiters' turn may have come.
local function refuse(reply)
  if unqueue(k, holder) then
    left_queue(k, job, now)
  end
  return reply
end

-- A holder that gave up on its grant (recordlate.lua): its request came
-- late.
if redis.call('HGET', k.r, 'ab') == holder then
  return refuse({'abandoned', int(now)})
end

-- Asked again by the holder of a live run (its first answer was lost):
-- the same lease, renewed as renew.lua would.
local runs = runs_of(k, job, now)
for _, u in ipairs(runs) do
  if u.live and u.f[1] == holder then
    local key, member = index_of(k, job, u.slot)
    redis.call('ZADD', key, now + ttl * 1000, member)
    redis.call('PEXPIRE', ev_key(k, u.slot), u.f[4])
    return {'ok', int(now), u.f[2], u.f[6], '', '', '0', '0', int(u.slot)}
  end
end

local function refuse_quarantined()
  local r = redis.call('HMGET', k.r, 'q', 'qr', 'qb', 'qc', 'ql', 'qo', 'lh', 'lo')
  return refuse({'quarantined', int(now), r[1] or '', r[2] or '', r[3] or '', r[4] or '', r[5] or r[7] or '',
    r[6] or r[8] or ''})
end

if redis.call('HEXISTS', k.r, 'q') == 1 then
  return refuse_quarantined()
end

local job_region = redis.call('HGET', k.r, 'g')
if region ~= '' and job_region and job_region ~= region then
  return refuse({'region', int(now), job_region})
end

-- The crashes of runs whose supervisor vanished, by slot: the first is
-- the grant's recovered crash.
local rec_ev, rec_stale, rec_crashes, rec_q = '', '', '0', '0'
local live = {}
for _, u in ipairs(runs) do
  if u.live then
    live[#live + 1] = u
  else
    local crashes, quarantined = consume_crash(k, job, u, now, 'supervisor vanished: liveness expired, found by acquire')
    if rec_ev == '' then
      rec_ev, rec_stale, rec_crashes, rec_q = u.raw, stale_since(u), int(crashes), int(quarantined)
    end
    if quarantined == 1 then
      return refuse_quarantined()
    end
  end
end

local job_slots = slots_of(k)
if #live > 0 and slots ~= job_slots then
  return refuse({'slots', int(now), int(job_slots)})
end

local q = queue_of(k)
prune(k, q, now)
if slots - #live <= ahead(q, holder) then
  local position = 0
  if waits then
    position = wait(k, q, holder, host, pid, ttl, now)
  end
  local held = {'held', int(now), '', '', int(job_slots), int(position), int(#q)}
  if #live >= slots then
    local first = live[1]
    for _, u in ipairs(live) do
      if tonumber(u.score) < tonumber(first.score) then
        first = u
      end
    end
    held[3], held[4] = first.raw, first.score
  end
  return held
end

if deadline > 0 and now > deadline then
  return refuse({'deadline', int(now)})
end

if min_interval > 0 then
  local success = redis.call('HGET', k.r, 's')
  if success and now - tonumber(success) < min_interval then
    return refuse({'toosoon', int(now), success})
  end
end

-- The lowest slot no live run is in.
local slot, taken = 0, {}
for _, u in ipairs(live) do
  taken[u.slot] = true
end
while taken[slot] do
  slot = slot + 1
end

local last = tonumber(redis.call('HGET', k.r, 't') or '0')
local token = int(math.max(last + 1, now))
local attempt = int(redis.call('HINCRBY', k.r, 'a', 1))
redis.call('HSET', k.r, 't', token, 'm', max_crashes, 'lh', holder, 'lo', host)
if slots > 1 then
  redis.call('HSET', k.r, 'n', int(slots))
else
  redis.call('HDEL', k.r, 'n')
end
-- The round trip renew.lua keeps is the holder's, and a stop request
-- (stop.lua) the run's: a new one has neither yet.
redis.call('HDEL', k.r, fld('rt', slot), fld('sp', slot), fld('sb', slot), fld('sr', slot), fld('sa', slot))
if region ~= '' and not job_region then
  redis.call('HSET', k.r, 'g', region)
end
if expect_every ~= '' then
  expect(k, job, now, expect_every, expect_grace)
end
redis.call('SET', ev_key(k, slot), holder .. SEP .. token .. SEP .. b36(tonumber(token) - now) .. SEP .. evidence_ttl ..
  SEP .. max_crashes .. SEP .. attempt .. SEP .. int(ttl) .. SEP .. host .. SEP .. pid .. command, 'PX', evidence_ttl)
local key, member = index_of(k, job, slot)
redis.call('ZADD', key, now + ttl * 1000, member)
redis.call('ZADD', k.jobs, 0, job)
unqueue(k, holder)
-- The detail leaves out host and pid: the evidence has them while the run
-- lasts, and the default worker ID (host:pid:random) keeps them in every
-- event; 20 copies would take a tenth of a job's memory at rest.
local detail = 'attempt ' .. attempt
if slots > 1 then
  detail = detail .. ', slot ' .. slot .. ' of ' .. slots
end
event(k, now, 'a', holder, token, detail)
-- For token feeds (write-through fencing caches): waiters ignore it.
redis.call('PUBLISH', k.n, 'g' .. token)
return {'ok', int(now), token, attempt, rec_ev, rec_stale, rec_crashes, rec_q, int(slot)}

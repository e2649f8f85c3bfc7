-- Helpers shared by every script: scripts.go prepends this file (and the
-- HISTORY_LIMIT constant) to each script's own file before hashing it, so
-- each script stays one self-contained EVAL body.
--
-- Layout (see layout.go and docs/redis-layout.md): every key of a job and
-- its shard's index and quarantine set carry the shard's hash tag, so each
-- script touches one Redis Cluster slot. <p> is the shard's prefix
-- <ns>:{<shard>}:, passed as ARGV[1].
--   <p><job>:e   the evidence of the run in slot 0, a job's only slot unless
--                it runs with --slots: one string, fields joined by NUL; its
--                Redis TTL is the evidence TTL. Fields: holder, token,
--                started (as its offset in us below the token, base 36:
--                usually 0), evidence ttl (ms), max crashes, attempt, ttl
--                (ms), host, pid, then one field per command argument.
--   <p><job>:e<S>  the evidence of the run in slot S >= 1 (runs.lua), alike.
--   <p><job>:q   the job's queue of waiters (queue.lua): a list, oldest
--                first, of packed waiters.
--   <p><job>:r   record: a small hash (see the field names below).
--   <p><job>:h   history: a list of packed events, oldest first (see event
--                below).
--   <p><job>:n   the job's notification channel; payloads: 'g'..token after a
--                grant, 'e'..token after a run ended (released, or its
--                crash counted), 'u' after a quarantine release, 'w' after a
--                waiter left the queue while a slot is free. Waiters
--                wake on all but 'g'; token feeds follow 'g' and 'e'.
--   <p>hb        the shard's heartbeat channel (sync.lua).
--   <p>live      the shard's index: job -> liveness expiry (us) of the run in
--                slot 0. The score IS the liveness: a run is live while its
--                score is in the future and its evidence is there.
--   <p>slots     the shard's index of the runs in slots >= 1: job NUL slot ->
--                liveness expiry (us), alike. A leasectl older than slots
--                reads only <p>live and <p><job>:e: it sees a one-slot job
--                exactly as it wrote it.
--   <p>quarantined  the shard's quarantined jobs.
--   <p>jobs      the shard's known jobs: a sorted set, every score 0, read in
--                lexical order (jobs.lua); a job joins it when it is first
--                granted or quarantined.
--   <p>due       the shard's jobs with an expectation: job -> due time (us),
--                when the job becomes overdue (overdue.lua). Named, not
--                declared: it shares the shard's slot.
-- NUL separates packed fields: it cannot occur in command-line arguments,
-- host names or anything else leasectl takes from argv.
--
-- Record fields: t last token, a attempts, c consecutive crashes, m max
-- crashes of the last run, lh/lo last holder/host, g region (set once, by
-- the first grant that names one), s last success (us),
-- q/qr/qb/qc quarantine since (us)/reason/by/crashes, o/oe/og/od/or/ow/ot/of
-- last outcome result/exit code/signal/duration (ns)/reason/worker/token/
-- finished (us), ab the last holder that gave up on its grant, rt the
-- current holder's last renewal round trip (us), as it reported it,
-- sp/sb/sr/sa an operator's stop request: the token of the run it is for,
-- by, reason, when (us), xe/xg/xs the expectation's every and grace (us)
-- and since when it holds (us), n the job's slots when more than one,
-- ql/qo the holder and host named by the quarantine (when absent, as a
-- leasectl older than slots wrote it: lh/lo). rt and sp/sb/sr/sa are of
-- the run in slot 0; those of slot S >= 1 carry S after their name (rt2,
-- sp2...).

local SEP = '\0'

-- int formats an integral number in full (tostring would use an exponent).
local function int(n)
  return string.format('%d', n)
end

-- now_us is the store's clock in microseconds since the Unix epoch.
local function now_us()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

-- split cuts a packed string at every NUL.
local function split(s)
  local out, i = {}, 1
  while true do
    local j = string.find(s, SEP, i, true)
    if not j then
      out[#out + 1] = string.sub(s, i)
      return out
    end
    out[#out + 1] = string.sub(s, i, j - 1)
    i = j + 1
  end
end

-- job_keys names the keys of job in the shard whose KEYS this script got
-- (index, quarantine set, known jobs, due index, slots index), for the per-shard
-- scripts that reach jobs' keys by name: legal on Redis Cluster, since they
-- share the shard's slot.
local function job_keys(prefix, job)
  local j = prefix .. job .. ':'
  return {e = j .. 'e', r = j .. 'r', h = j .. 'h', n = j .. 'n', q = j .. 'q', idx = KEYS[1], qs = KEYS[2],
    jobs = KEYS[3], due = KEYS[4], sidx = KEYS[5]}
end

-- declared_keys names the keys of a per-job script, whose KEYS are
-- evidence, record, history, index, quarantine set, known jobs, due index,
-- slots index (in that order). The queue, like the channel, is named: it
-- shares the job's slot.
local function declared_keys(prefix, job)
  return {e = KEYS[1], r = KEYS[2], h = KEYS[3], n = prefix .. job .. ':n', q = prefix .. job .. ':q', idx = KEYS[4],
    qs = KEYS[5], jobs = KEYS[6], due = KEYS[7], sidx = KEYS[8]}
end

local B36 = '0123456789abcdefghijklmnopqrstuvwxyz'

-- b36 formats an integral number in base 36, the densest form that stays
-- printable (history events are the bulk of a job's memory at rest).
local function b36(n)
  local sign, s = '', ''
  if n < 0 then
    sign, n = '-', -n
  end
  repeat
    local d = n % 36
    s = string.sub(B36, d + 1, d + 1) .. s
    n = (n - d) / 36
  until n == 0
  return sign .. s
end

-- event appends one packed event to the history, dropping the oldest:
-- kind letter and time (base 36, us) together, worker, token as its offset
-- from the time (base 36; empty for none: an acquired event's token is
-- usually its time, a released one's the run's start), detail.
-- Kinds: a acquired, r released, c crashed, q quarantined, u released from
-- quarantine, l lease lost, x late outcome, p stop requested, e expectation
-- set.
local function event(k, now, kind, worker, token, detail)
  local offset = ''
  if token ~= '' then
    offset = b36(now - tonumber(token))
  end
  redis.call('RPUSH', k.h, kind .. b36(now) .. SEP .. worker .. SEP .. offset .. SEP .. detail)
  redis.call('LTRIM', k.h, -HISTORY_LIMIT, -1)
end

-- quarantine puts the job in quarantine (keeping the since, and the holder
-- and host it names, of an existing quarantine) and records it in the
-- history. A new quarantine names holder and host.
local function quarantine(k, job, now, by, reason, worker, token, holder, host)
  local crashes = redis.call('HGET', k.r, 'c') or '0'
  if redis.call('HEXISTS', k.r, 'q') == 0 then
    redis.call('HSET', k.r, 'q', int(now), 'ql', holder, 'qo', host)
  end
  redis.call('HSET', k.r, 'qr', reason, 'qb', by, 'qc', crashes)
  redis.call('SADD', k.qs, job)
  redis.call('ZADD', k.jobs, 0, job)
  event(k, now, 'q', worker, token, 'by ' .. by .. ': ' .. reason)
end

-- set_due puts the job in its shard's due index at the time it becomes
-- overdue (semantics.md, Expect): its last success, or since when its
-- expectation holds, plus every and grace. A job without one leaves it.
local function set_due(k, job)
  local x = redis.call('HMGET', k.r, 'xe', 'xg', 'xs', 's')
  if not x[1] then
    redis.call('ZREM', k.due, job)
    return
  end
  redis.call('ZADD', k.due, tonumber(x[4] or x[3]) + tonumber(x[1]) + tonumber(x[2]), job)
end

-- expect records the expectation every and grace (us, decimal strings) at
-- now: the last writer's, its since kept while every and grace are
-- unchanged.
local function expect(k, job, now, every, grace)
  local x = redis.call('HMGET', k.r, 'xe', 'xg')
  if x[1] ~= every or x[2] ~= grace then
    redis.call('HSET', k.r, 'xe', every, 'xg', grace, 'xs', int(now))
    set_due(k, job)
  end
end

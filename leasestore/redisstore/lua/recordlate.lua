-- recordlate: record the outcome of a run that did not reach the store in
-- time, and undo what its absence did (docs/semantics.md, RecordLate). The
-- history walk is the rules' (package rules, RecordLate), in Lua.
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, holder, token ('0': unknown), result, exit code,
--       signal, duration (ns), reason, history detail (the outcome's).
-- Returns {released 0/1, crash withdrawn 0/1, quarantine lifted 0/1,
-- consecutive crashes}.
local prefix, job, holder, token = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local result, detail = ARGV[5], ARGV[10]
local k = declared_keys(prefix, job)
local now = now_us()
-- A holder that gave up on its grant: refused from now on (acquire.lua),
-- and out of the queue, as leave.lua takes a waiter out.
if token == '0' then
  redis.call('HSET', k.r, 'ab', holder)
  if unqueue(k, holder) then
    left_queue(k, job, now)
  end
end
local crashes = tonumber(redis.call('HGET', k.r, 'c') or '0')

-- 1. The run's evidence is there (the holder's run with the token, or with
-- token '0' its first by slot): Release.
for _, u in ipairs(runs_of(k, job, now)) do
  if u.f[1] == holder and (token == '0' or u.f[2] == token) then
    release_run(k, job, u, now, {result = result, exit = ARGV[6], signal = ARGV[7], duration = ARGV[8],
      reason = ARGV[9], detail = detail})
    return {1, 0, 0, tonumber(redis.call('HGET', k.r, 'c') or '0')}
  end
end

-- 2. The history: unpack it (lib.lua, event).
local function unb36(s)
  if string.sub(s, 1, 1) == '-' then
    return -tonumber(string.sub(s, 2), 36)
  end
  return tonumber(s, 36)
end
local evs = {}
for i, raw in ipairs(redis.call('LRANGE', k.h, 0, -1)) do
  local f = split(raw)
  local at = tonumber(string.sub(f[1], 2), 36)
  local tok = ''
  if f[3] ~= '' then
    tok = int(at - unb36(f[3]))
  end
  evs[i] = {kind = string.sub(f[1], 1, 1), at = at, worker = f[2], token = tok, detail = f[4]}
end
local function of_run(e)
  return e.worker == holder and (token == '0' or e.token == token)
end
local function late_recorded(worker, tok)
  for _, e in ipairs(evs) do
    if e.kind == 'x' and e.worker == worker and e.token == tok then
      return true
    end
  end
  return false
end

local crashed, run_token, started = nil, token, nil
for i, e in ipairs(evs) do
  if (e.kind == 'r' or e.kind == 'c' and string.sub(e.detail, 1, 8) == 'crashed ') and of_run(e) then
    -- Released in time after all, or by an earlier delivery of this one
    -- while its evidence was there (as crashed, too: the crash counted for
    -- it is no absence to undo): recorded.
    return {0, 0, 0, crashes}
  elseif e.kind == 'c' and of_run(e) then
    crashed, run_token = i, e.token
  elseif e.kind == 'a' and of_run(e) then
    started, run_token = e.at, e.token
  end
end
local last = tonumber(redis.call('HGET', k.r, 't') or '0')
if run_token == '0' or late_recorded(holder, run_token) or tonumber(run_token) > last then
  return {0, 0, 0, crashes}
end

-- The crash counted for the run still counts unless a completed run, or an
-- operator's release from quarantine, came after it.
local withdrawn, crashed_at = 0, nil
if crashed then
  local resets = false
  for i = crashed + 1, #evs do
    local e = evs[i]
    local completed = string.sub(e.detail, 1, 10) == 'completed '
    if (e.kind == 'r' and completed) or (e.kind == 'x' and completed and tonumber(e.token) > tonumber(run_token))
      or (e.kind == 'u' and e.worker ~= 'leasectl') then
      resets = true
      break
    end
  end
  if not resets then
    withdrawn, crashed_at = 1, evs[crashed].at
    if result == 'completed' then
      crashes = 0
      for i = crashed + 1, #evs do
        if evs[i].kind == 'c' and not late_recorded(evs[i].worker, evs[i].token) then
          crashes = crashes + 1
        end
      end
      if started then
        local success = started + math.floor(tonumber(ARGV[8]) / 1000)
        if success > tonumber(redis.call('HGET', k.r, 's') or '0') then
          redis.call('HSET', k.r, 's', int(success))
          set_due(k, job)
        end
      end
    else
      crashes = math.max(0, crashes - 1)
    end
    redis.call('HSET', k.r, 'c', int(crashes))
  end
end

local lifted = 0
if withdrawn == 1 then
  detail = detail .. '; the crash counted for it is withdrawn'
  local q = redis.call('HMGET', k.r, 'q', 'qb', 'm')
  if q[1] and q[2] == 'leasectl' and tonumber(q[1]) >= crashed_at and crashes < tonumber(q[3] or '0') then
    redis.call('HDEL', k.r, 'q', 'qr', 'qb', 'qc', 'ql', 'qo')
    redis.call('SREM', k.qs, job)
    event(k, now, 'u', 'leasectl', '', 'by leasectl: the crash of token ' .. run_token ..
      ' that led to it was withdrawn: its outcome arrived late')
    redis.call('PUBLISH', k.n, 'u')
    wake_waiters(k, job, now)
    lifted = 1
    detail = detail .. '; the quarantine it led to is lifted'
  end
end
-- Recorded now: after the crash counted for the run, which status readers
-- compare it with.
if tonumber(redis.call('HGET', k.r, 'ot') or '0') < tonumber(run_token) then
  redis.call('HSET', k.r, 'o', result, 'oe', ARGV[6], 'og', ARGV[7], 'od', ARGV[8],
    'or', ARGV[9], 'ow', holder, 'ot', run_token, 'of', int(now))
end
event(k, now, 'x', holder, run_token, detail)
return {0, withdrawn, lifted, crashes}

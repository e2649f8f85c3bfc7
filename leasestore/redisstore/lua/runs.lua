
-- A job's runs, one per slot (semantics.md#slots-and-the-queue):
-- scripts.go prepends this file after lib.lua and queue.lua. The run in slot 0 keeps the
-- keys a leasectl older than slots wrote (<p><job>:e, the job in <p>live,
-- rt and sp/sb/sr/sa), so a one-slot job reads the same to both; the run
-- in slot S >= 1 has <p><job>:e<S>, the member job NUL S of <p>slots, and
-- rt<S>, sp<S>... A run is a table {slot, f (its split evidence), raw (its
-- packed evidence), score (its liveness expiry, or false when its index
-- entry is gone), live}.

-- ev_key is the key of the evidence of the job's run in slot.
local function ev_key(k, slot)
  if slot == 0 then
    return k.e
  end
  return k.e .. slot
end

-- index_of is the index key and member of the job's run in slot.
local function index_of(k, job, slot)
  if slot == 0 then
    return k.idx, job
  end
  return k.sidx, job .. SEP .. slot
end

-- fld is the record field name of the run in slot.
local function fld(name, slot)
  if slot == 0 then
    return name
  end
  return name .. slot
end

-- slots_of is the job's number of slots, as its last grant asked for it.
local function slots_of(k)
  return tonumber(redis.call('HGET', k.r, 'n') or '1')
end

-- run_in reads the job's run in slot at now; nil when its evidence is gone.
local function run_in(k, job, slot, now)
  local raw = redis.call('GET', ev_key(k, slot))
  if not raw then
    return nil
  end
  local key, member = index_of(k, job, slot)
  local score = redis.call('ZSCORE', key, member)
  return {slot = slot, f = split(raw), raw = raw, score = score, live = score ~= false and tonumber(score) > now}
end

-- runs_of reads the job's runs whose evidence is there at now, by slot.
-- Every such run is in a slot below the job's slots: their number changes
-- only on a grant to a job without a live run, after its crashes were
-- counted.
local function runs_of(k, job, now)
  local runs = {}
  for slot = 0, slots_of(k) - 1 do
    runs[#runs + 1] = run_in(k, job, slot, now)
  end
  return runs
end

-- run_of finds the job's run with token, looking in slot hint first; nil
-- when no run has it (its evidence is gone).
local function run_of(k, job, token, hint, now)
  local u = run_in(k, job, hint, now)
  if u and u.f[2] == token then
    return u
  end
  for _, v in ipairs(runs_of(k, job, now)) do
    if v.f[2] == token then
      return v
    end
  end
  return nil
end

-- stale_since is when run u's liveness expired: its index score, or, with
-- its index entry gone, its start.
local function stale_since(u)
  return u.score or int(tonumber(u.f[2]) - tonumber(u.f[3], 36))
end

-- drop_run deletes run u's evidence and index entry.
local function drop_run(k, job, u)
  redis.call('DEL', ev_key(k, u.slot))
  local key, member = index_of(k, job, u.slot)
  redis.call('ZREM', key, member)
end

-- free_slots is how many of the job's slots no live run is in at now.
local function free_slots(k, job, now)
  local free = slots_of(k)
  for _, u in ipairs(runs_of(k, job, now)) do
    if u.live then
      free = free - 1
    end
  end
  return free
end

-- wake_waiters wakes the waiters whose turn it is: the first of the job's
-- queue (its lapsed waiters left out), as many as slots are free at now,
-- each on a channel of its own (<p><job>:n#<worker>, which no job's channel
-- is: '#' is in no job ID), so that the others sleep on (rules, Acquire:
-- a free slot goes only to the oldest waiters).
local function wake_waiters(k, job, now)
  local free = free_slots(k, job, now)
  for _, w in ipairs(queue_of(k)) do
    if free <= 0 then
      return
    end
    if w['until'] > now then
      redis.call('PUBLISH', k.n .. '#' .. w.worker, 'w')
      free = free - 1
    end
  end
end

-- left_queue tells of a waiter that left the job's queue (Leave, a refusal,
-- a grant given up on): while a slot is free, the job's channel says so
-- ('w', for the registry and the waiters of a leasectl older than waking
-- in turn, which listen there) and the waiters whose turn it now is are
-- woken.
local function left_queue(k, job, now)
  if free_slots(k, job, now) > 0 then
    redis.call('PUBLISH', k.n, 'w')
    wake_waiters(k, job, now)
  end
end

-- consume_crash counts the crash of run u: crash count + 1, history,
-- evidence and index entry gone, quarantine of the job as a whole at the
-- run's threshold, waiters and token feeds told. Returns the crash count
-- and 1 when this crash quarantined the job, else 0 (also when the job was
-- quarantined already).
local function consume_crash(k, job, u, now, detail)
  local f = u.f
  local crashes = redis.call('HINCRBY', k.r, 'c', 1)
  event(k, now, 'c', f[1], f[2], detail)
  drop_run(k, job, u)
  local quarantined = 0
  if redis.call('HEXISTS', k.r, 'q') == 0 and crashes >= tonumber(f[5]) then
    quarantine(k, job, now, 'leasectl', int(crashes) .. ' consecutive crashes', f[1], f[2], f[1], f[8])
    quarantined = 1
  end
  redis.call('PUBLISH', k.n, 'e' .. f[2])
  wake_waiters(k, job, now)
  return crashes, quarantined
end

-- release_run ends run u with its outcome (semantics.md, Release): the
-- outcome recorded, then the crash counted for a crashed run, or the
-- evidence and index entry gone, the crash count reset by a completed run,
-- a released event, waiters and token feeds told. o holds the outcome:
-- result, exit code, signal, duration (ns), reason, history detail.
local function release_run(k, job, u, now, o)
  local f = u.f
  redis.call('HSET', k.r, 'o', o.result, 'oe', o.exit, 'og', o.signal, 'od', o.duration,
    'or', o.reason, 'ow', f[1], 'ot', f[2], 'of', int(now))
  if o.result == 'crashed' then
    consume_crash(k, job, u, now, o.detail)
    return
  end
  if o.result == 'completed' then
    redis.call('HSET', k.r, 'c', '0', 's', int(now))
    set_due(k, job)
  end
  drop_run(k, job, u)
  event(k, now, 'r', f[1], f[2], o.detail)
  redis.call('PUBLISH', k.n, 'e' .. f[2])
  wake_waiters(k, job, now)
end

-- stop_of returns the operator's request that the run in slot with token
-- stop (stop.lua) as {by, reason, at}, or nil when none was made.
local function stop_of(k, slot, token)
  local sp = redis.call('HMGET', k.r, fld('sp', slot), fld('sb', slot), fld('sr', slot), fld('sa', slot))
  if sp[1] == token then
    return {sp[2], sp[3], sp[4]}
  end
  return nil
end

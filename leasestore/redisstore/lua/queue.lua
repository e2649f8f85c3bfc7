
-- A job's queue of waiters (semantics.md#slots-and-the-queue; package
-- rules, queue.go): scripts.go prepends this file after lib.lua, before
-- runs.lua. The
-- queue is the list <p><job>:q, oldest first; each waiter is packed as
-- worker, host, pid, since (us), until (us), joined by NUL. A waiter whose
-- until passed has lapsed, and is dropped by the next acquire or leave.

-- queue_of reads the job's queue: each waiter as {worker, raw (packed),
-- until (us)}.
local function queue_of(k)
  local q = {}
  for _, raw in ipairs(redis.call('LRANGE', k.q, 0, -1)) do
    local f = split(raw)
    q[#q + 1] = {worker = f[1], raw = raw, ['until'] = tonumber(f[5])}
  end
  return q
end

-- prune drops the waiters of q that lapsed at now, from the list and from
-- q.
local function prune(k, q, now)
  for i = #q, 1, -1 do
    if q[i]['until'] <= now then
      redis.call('LREM', k.q, 1, q[i].raw)
      table.remove(q, i)
    end
  end
end

-- ahead is how many waiters of q come before holder: its place, or all of
-- them when it is not in q.
local function ahead(q, holder)
  for i, w in ipairs(q) do
    if w.worker == holder then
      return i - 1
    end
  end
  return #q
end

-- unqueue takes holder out of the job's queue, and reports whether it was
-- in it.
local function unqueue(k, holder)
  for _, raw in ipairs(redis.call('LRANGE', k.q, 0, -1)) do
    if split(raw)[1] == holder then
      redis.call('LREM', k.q, 1, raw)
      return true
    end
  end
  return false
end

-- wait puts holder in the queue q at now, at the tail, or, once its place
-- has at most half its ttl (ms) left, keeps it alive for another ttl, and
-- returns its position, from 1 (rules, wait: every waiter asks once per
-- heartbeat, and each ask would otherwise be a write).
local function wait(k, q, holder, host, pid, ttl, now)
  local until_ = now + ttl * 1000
  local i = ahead(q, holder)
  if i < #q then
    local w = q[i + 1]
    if w['until'] - now <= ttl * 500 then
      local f = split(w.raw)
      w.raw = f[1] .. SEP .. f[2] .. SEP .. f[3] .. SEP .. f[4] .. SEP .. int(until_)
      w['until'] = until_
      redis.call('LSET', k.q, i, w.raw)
    end
    return i + 1
  end
  local raw = holder .. SEP .. host .. SEP .. pid .. SEP .. int(now) .. SEP .. int(until_)
  redis.call('RPUSH', k.q, raw)
  q[#q + 1] = {worker = holder, raw = raw, ['until'] = until_}
  return #q
end

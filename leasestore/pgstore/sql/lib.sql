-- lib: helpers of the operations, not called by leasectl itself. They run
-- inside the operations, which are SECURITY DEFINER functions with a safe
-- search_path; called on their own, they have only the caller's rights.
--
-- Every operation takes its job's lock itself (the job's row, FOR NO KEY
-- UPDATE) and writes its history events itself (insert the event numbered
-- jobs.events + 1, delete those beyond the last @history@): each plpgsql
-- function a session calls for the first time costs it a compilation and
-- plans, and a run's session calls acquire and release once each.
-- Placeholders: @schema@ (quoted), @ns@ (the namespace as a literal),
-- @version@ (the schema version these functions belong to), @history@
-- (events kept per job).

-- _us is t in microseconds since the Unix epoch, the unit of every time the
-- functions return (docs/semantics.md, Rules every operation follows).
CREATE OR REPLACE FUNCTION @schema@._us(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

-- _micros is a duration of us microseconds.
CREATE OR REPLACE FUNCTION @schema@._micros(us bigint) RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$ SELECT us * interval '1 microsecond' $$;

-- _check_version raises SQLSTATE LC001, with this schema's version as the
-- detail, when the caller expects another version: leasectl then migrates
-- (or says that it is older than the schema).
CREATE OR REPLACE FUNCTION @schema@._check_version(p_version integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    RAISE EXCEPTION 'leasectl schema % is at version %, the client expects version %', @ns@, @version@, p_version
      USING ERRCODE = 'LC001', DETAIL = '@version@';
  END IF;
END $$;

-- _channel is the LISTEN/NOTIFY channel of a job's waiters.
CREATE OR REPLACE FUNCTION @schema@._channel(p_job text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT 'leasectl_' || md5(@ns@ || E'\n' || p_job) $$;

-- _waiter_channel is the LISTEN/NOTIFY channel on which one waiter of a job
-- is woken in its turn (_wake_waiters).
CREATE OR REPLACE FUNCTION @schema@._waiter_channel(p_job text, p_worker text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT 'leasectl_' || md5(@ns@ || E'\n' || p_job || E'\n' || p_worker) $$;

-- _wake_waiters wakes the waiters of the job whose turn it is at p_now: the
-- first of its queue whose place has not lapsed, as many as slots are free,
-- each on its own channel, so that the others sleep on (docs/semantics.md,
-- Slots and the queue). The caller holds the job's lock. Returns how many
-- it woke (the count makes every row's notification be sent).
CREATE OR REPLACE FUNCTION @schema@._wake_waiters(p_job text, p_now timestamptz) RETURNS bigint
LANGUAGE sql AS $$
  SELECT count(pg_notify(@schema@._waiter_channel(p_job, q.worker), ''))
  FROM (SELECT q.worker FROM @schema@.queue q WHERE q.job = p_job AND q.live_until > p_now ORDER BY q.seq
    LIMIT greatest(0, (SELECT j.slots FROM @schema@.jobs j WHERE j.job = p_job)
      - (SELECT count(*) FROM @schema@.runs r WHERE r.job = p_job AND r.live_until > p_now))) q
$$;

-- _publish_token tells the namespace's token feeds (tokenfeed.go) that the
-- job's token changed: a grant ('g') or the end of a run ('e'), the token,
-- a space and the job, on the namespace's one token channel, so that a
-- feed listens once for all its jobs. Like every NOTIFY it is delivered
-- only if the transaction commits, in commit order.
CREATE OR REPLACE FUNCTION @schema@._publish_token(p_kind text, p_token bigint, p_job text) RETURNS void
LANGUAGE sql
AS $$ SELECT pg_notify('leasectl_tokens_' || md5(@ns@), p_kind || p_token || ' ' || p_job) $$;

-- _quarantine_json describes the job's quarantine.
CREATE OR REPLACE FUNCTION @schema@._quarantine_json(j @schema@.jobs) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('job', j.job, 'since', @schema@._us(j.q_since), 'reason', j.q_reason, 'by', j.q_by,
    'crashes', j.q_crashes, 'last_holder', j.q_last_holder, 'last_host', j.q_last_host)
$$;

-- _count_crashes counts runs as crashes, each exactly once
-- (docs/semantics.md, Counting a crash): the run deleted, crash count + 1,
-- a crashed event, quarantine of the job as a whole at the run's own
-- threshold (a quarantined event, at the first of the job's crashes that
-- reaches it), waiters and token feeds notified. Without p_token, the runs
-- of p_jobs whose liveness expired at p_now count, a job's by slot, and
-- those whose evidence expired too are dropped uncounted (Scan); with it,
-- the run of that token counts whatever its liveness (Acquire, one run at
-- a time; Release with result crashed). The caller holds the jobs' locks
-- and has read the clock. p_detail is the crashed events' detail; when
-- NULL, it is semantics.md's words for a crash found by p_by (acquire,
-- scan). It is one statement, set by set, so that a scan counts a thousand
-- crashes in one go, in plpgsql, so that a session (the reaper's) plans it
-- once. Returns the crashes, a JSON array ordered by liveness expiry.
CREATE OR REPLACE FUNCTION @schema@._count_crashes(p_jobs text[], p_now timestamptz, p_token bigint,
  p_detail text, p_by text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_crashes json;
BEGIN
  WITH gone AS (
    DELETE FROM @schema@.runs r
    WHERE r.job = ANY (p_jobs) AND CASE WHEN p_token IS NULL THEN r.live_until <= p_now ELSE r.token = p_token END
    RETURNING r.*
  ), numbered AS (
    -- The n-th crash of a job in this statement, by slot, is its
    -- crashes + n; it reaches the threshold if the job is not quarantined.
    SELECT g.*, j.crashes + row_number() OVER w AS crashes, row_number() OVER w AS n, j.events,
      j.q_since IS NULL AND j.crashes + row_number() OVER w >= g.max_crashes AS reaches
    FROM gone g JOIN @schema@.jobs j ON j.job = g.job
    WHERE g.evidence_until > p_now
    WINDOW w AS (PARTITION BY g.job ORDER BY g.slot)
  ), crashed AS (
    -- Only the first crash that reaches it quarantines; each event after
    -- that quarantined event comes one later.
    SELECT c.*, c.reaches AND NOT c.behind AS quarantine, c.events + c.n + c.behind::integer AS seq
    FROM (SELECT n.*, coalesce(bool_or(n.reaches) OVER (PARTITION BY n.job ORDER BY n.slot
        ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING), false) AS behind
      FROM numbered n) c
  ), counted AS (
    UPDATE @schema@.jobs j SET crashes = k.crashes, events = k.events,
      q_since = CASE WHEN k.q_crashes IS NOT NULL THEN p_now ELSE j.q_since END,
      q_by = CASE WHEN k.q_crashes IS NOT NULL THEN 'leasectl' ELSE j.q_by END,
      q_reason = CASE WHEN k.q_crashes IS NOT NULL THEN format('%s consecutive crashes', k.q_crashes) ELSE j.q_reason END,
      q_crashes = coalesce(k.q_crashes, j.q_crashes),
      q_last_holder = CASE WHEN k.q_crashes IS NOT NULL THEN k.q_holder ELSE j.q_last_holder END,
      q_last_host = CASE WHEN k.q_crashes IS NOT NULL THEN k.q_host ELSE j.q_last_host END
    FROM (SELECT c.job, max(c.crashes) AS crashes, max(c.seq + c.quarantine::integer) AS events,
        max(c.crashes) FILTER (WHERE c.quarantine) AS q_crashes, max(c.holder) FILTER (WHERE c.quarantine) AS q_holder,
        max(c.host) FILTER (WHERE c.quarantine) AS q_host
      FROM crashed c GROUP BY c.job) k
    WHERE j.job = k.job
  ), recorded AS (
    INSERT INTO @schema@.history (job, seq, at, kind, worker, token, result, detail)
    SELECT c.job, c.seq, p_now, 'crashed', c.holder, c.token, CASE WHEN p_detail IS NOT NULL THEN 'crashed' END,
      coalesce(p_detail,
      'supervisor vanished: liveness expired, found by ' || p_by)
    FROM crashed c
    UNION ALL
    SELECT c.job, c.seq + 1, p_now, 'quarantined', c.holder, c.token, NULL, format('by leasectl: %s consecutive crashes', c.crashes)
    FROM crashed c WHERE c.quarantine
  )
  SELECT coalesce(json_agg(json_build_object('job', c.job, 'holder', c.holder, 'host', c.host, 'pid', c.pid,
      'token', c.token, 'command', c.command, 'started', @schema@._us(c.started), 'stale', @schema@._us(c.live_until),
      'detected', @schema@._us(p_now), 'crashes', c.crashes, 'quarantined', c.quarantine) ORDER BY c.live_until), '[]')
  INTO v_crashes
  FROM (SELECT c.*, pg_notify(@schema@._channel(c.job), ''), @schema@._publish_token('e', c.token, c.job)
    FROM crashed c) c;
  -- Once the runs are gone (a statement does not see its own changes).
  PERFORM @schema@._wake_waiters(c.job, p_now) FROM (SELECT DISTINCT e->>'job' AS job FROM json_array_elements(v_crashes) e) c;
  -- The history each job keeps, once this statement's events are in it.
  DELETE FROM @schema@.history h USING @schema@.jobs j
  WHERE h.job = ANY (p_jobs) AND j.job = h.job AND h.seq <= j.events - @history@;
  RETURN v_crashes;
END $$;

-- _left_queue tells of a waiter that left the job's queue (leave, a
-- refusal, a grant given up on): while a slot is free at p_now, the job's
-- channel is notified (the registry, and the waiters of a leasectl older
-- than waking in turn, listen there) and the waiters whose turn it now is
-- are woken. The caller holds the job's lock.
CREATE OR REPLACE FUNCTION @schema@._left_queue(p_job text, p_now timestamptz) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF (SELECT count(*) FROM @schema@.runs WHERE job = p_job AND live_until > p_now)
      < (SELECT slots FROM @schema@.jobs WHERE job = p_job) THEN
    PERFORM pg_notify(@schema@._channel(p_job), '');
    PERFORM @schema@._wake_waiters(p_job, p_now);
  END IF;
END $$;

-- _refused is p_answer, an acquire's refusal other than held at p_now (the
-- acquire's clock): p_holder will not wait for the job, and leaves its
-- queue (docs/semantics.md, Acquire), which may bring the next waiters'
-- turn. The caller holds the job's lock.
CREATE OR REPLACE FUNCTION @schema@._refused(p_job text, p_holder text, p_now timestamptz, p_answer json) RETURNS json
LANGUAGE plpgsql AS $$
BEGIN
  DELETE FROM @schema@.queue WHERE job = p_job AND worker = p_holder;
  IF FOUND THEN
    PERFORM @schema@._left_queue(p_job, p_now);
  END IF;
  RETURN p_answer;
END $$;

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

-- _count_crashes counts the runs of p_jobs as crashes, each exactly once
-- (docs/semantics.md, Counting a crash): the run deleted, crash count + 1,
-- a crashed event, quarantine at the run's own threshold (a quarantined
-- event), waiters and token feeds notified. With p_expired, only runs whose liveness
-- expired at p_now count, and those whose evidence expired too are dropped
-- uncounted (Acquire, Scan); without it, the runs count whatever their
-- liveness (Release with result crashed). The caller holds the jobs' locks
-- and has read the clock. p_detail is the crashed events' detail; when
-- NULL, it is semantics.md's words for a crash found by p_by (acquire,
-- scan). It is one statement, set by
-- set, so that a scan counts a thousand crashes in one go, in plpgsql, so
-- that a session (the reaper's) plans it once. Returns the crashes, a JSON
-- array ordered by liveness expiry.
CREATE OR REPLACE FUNCTION @schema@._count_crashes(p_jobs text[], p_now timestamptz, p_expired boolean,
  p_detail text, p_by text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_crashes json;
BEGIN
  WITH gone AS (
    DELETE FROM @schema@.runs r
    WHERE r.job = ANY (p_jobs) AND (NOT p_expired OR r.live_until <= p_now)
    RETURNING r.*
  ), crashed AS (
    SELECT g.*, j.crashes + 1 AS crashes, j.events AS seq,
      j.q_since IS NULL AND j.crashes + 1 >= g.max_crashes AS quarantine
    FROM gone g JOIN @schema@.jobs j ON j.job = g.job
    WHERE g.evidence_until > p_now
  ), counted AS (
    UPDATE @schema@.jobs j SET crashes = c.crashes,
      events = c.seq + CASE WHEN c.quarantine THEN 2 ELSE 1 END,
      q_since = CASE WHEN c.quarantine THEN p_now ELSE j.q_since END,
      q_by = CASE WHEN c.quarantine THEN 'leasectl' ELSE j.q_by END,
      q_reason = CASE WHEN c.quarantine THEN format('%s consecutive crashes', c.crashes) ELSE j.q_reason END,
      q_crashes = CASE WHEN c.quarantine THEN c.crashes ELSE j.q_crashes END,
      q_last_holder = CASE WHEN c.quarantine THEN c.holder ELSE j.q_last_holder END,
      q_last_host = CASE WHEN c.quarantine THEN c.host ELSE j.q_last_host END
    FROM crashed c WHERE j.job = c.job
  ), recorded AS (
    INSERT INTO @schema@.history (job, seq, at, kind, worker, token, result, detail)
    SELECT c.job, c.seq + 1, p_now, 'crashed', c.holder, c.token, CASE WHEN p_detail IS NOT NULL THEN 'crashed' END,
      coalesce(p_detail,
      'supervisor vanished: liveness expired, found by ' || p_by)
    FROM crashed c
    UNION ALL
    SELECT c.job, c.seq + 2, p_now, 'quarantined', c.holder, c.token, NULL, format('by leasectl: %s consecutive crashes', c.crashes)
    FROM crashed c WHERE c.quarantine
  ), trimmed AS (
    DELETE FROM @schema@.history h USING crashed c
    WHERE h.job = c.job AND h.seq <= c.seq + CASE WHEN c.quarantine THEN 2 ELSE 1 END - @history@
  )
  SELECT coalesce(json_agg(json_build_object('job', c.job, 'holder', c.holder, 'host', c.host, 'pid', c.pid,
      'token', c.token, 'command', c.command, 'started', @schema@._us(c.started), 'stale', @schema@._us(c.live_until),
      'detected', @schema@._us(p_now), 'crashes', c.crashes, 'quarantined', c.quarantine) ORDER BY c.live_until), '[]')
  INTO v_crashes
  FROM (SELECT c.*, pg_notify(@schema@._channel(c.job), ''), @schema@._publish_token('e', c.token, c.job)
    FROM crashed c) c;
  RETURN v_crashes;
END $$;

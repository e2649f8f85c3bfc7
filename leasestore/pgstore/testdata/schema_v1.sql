-- The schema at version 1, as leasectl at commit ef9e35a made it for namespace
-- pgstore-v1 (`leasectl store migrate --sql`), for TestMigrationFromVersion1:
-- a database an earlier leasectl left must migrate with its data intact.
-- Never regenerate it from a later leasectl.
-- leasectl: schema "pgstore-v1" at version 1. Run it as the role that owns the schema.
BEGIN;
SELECT pg_advisory_xact_lock(-142322024951977720);
DO $leasectl$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'pgstore-v1') THEN
    CREATE SCHEMA "pgstore-v1";
  END IF;
END $leasectl$;
CREATE TABLE IF NOT EXISTS "pgstore-v1".meta (version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT clock_timestamp());
COMMENT ON TABLE "pgstore-v1".meta IS 'leasectl: the schema version';
INSERT INTO "pgstore-v1".meta (version) SELECT 0 WHERE NOT EXISTS (SELECT FROM "pgstore-v1".meta);
SELECT version AS previous_version FROM "pgstore-v1".meta;
DO $leasectl$
DECLARE
  v integer;
BEGIN
  SELECT version INTO v FROM "pgstore-v1".meta;
  IF v > 1 THEN
    RAISE EXCEPTION 'schema %s is at version %s, newer than this leasectl''s 1', 'pgstore-v1', v
      USING ERRCODE = 'LC002', DETAIL = v::text;
  END IF;
  IF v < 1 THEN
    EXECUTE $step$
-- Migration to schema version 1: the tables. Placeholders: "pgstore-v1" (the
-- namespace's schema, quoted). Times are timestamptz from the server's
-- clock_timestamp(); job IDs compare and sort byte by byte (COLLATE "C").

-- jobs: one row per job ever seen, its record (docs/design.md §5). The row
-- is the job's lock: every transition takes it FOR NO KEY UPDATE first.
CREATE TABLE "pgstore-v1".jobs (
  job           text COLLATE "C" PRIMARY KEY,
  last_token    bigint  NOT NULL DEFAULT 0,
  attempts      bigint  NOT NULL DEFAULT 0,
  crashes       integer NOT NULL DEFAULT 0, -- consecutive
  max_crashes   integer NOT NULL DEFAULT 0, -- the last run's threshold
  last_holder   text    NOT NULL DEFAULT '',
  last_host     text    NOT NULL DEFAULT '',
  last_success  timestamptz,
  events        bigint  NOT NULL DEFAULT 0, -- history events ever recorded: the last one's seq
  -- quarantine, when q_since is set
  q_since       timestamptz,
  q_by          text,
  q_reason      text,
  q_crashes     integer,
  q_last_holder text,
  q_last_host   text,
  -- the last run's outcome, when o_result is set
  o_result      text,
  o_exit_code   integer,
  o_signal      integer,
  o_duration_ns bigint,
  o_reason      text,
  o_worker      text,
  o_token       bigint,
  o_finished    timestamptz
);
CREATE INDEX jobs_quarantined ON "pgstore-v1".jobs (job) WHERE q_since IS NOT NULL;
COMMENT ON TABLE "pgstore-v1".jobs IS 'leasectl: one row per job, its record; change it only through the functions of this schema';

-- runs: the current run of a job, its liveness (until live_until) and its
-- evidence (until evidence_until); deleted when the run ends or its crash
-- is counted. Indexed by liveness expiry, so that a scan reads the expired
-- runs only.
CREATE TABLE "pgstore-v1".runs (
  job            text COLLATE "C" PRIMARY KEY,
  holder         text        NOT NULL,
  token          bigint      NOT NULL,
  host           text        NOT NULL,
  pid            integer     NOT NULL,
  command        text[]      NOT NULL,
  started        timestamptz NOT NULL,
  attempt        bigint      NOT NULL,
  evidence_ttl   interval    NOT NULL,
  max_crashes    integer     NOT NULL,
  live_until     timestamptz NOT NULL,
  evidence_until timestamptz NOT NULL
);
CREATE INDEX runs_live_until ON "pgstore-v1".runs (live_until);
COMMENT ON TABLE "pgstore-v1".runs IS 'leasectl: runs in flight (liveness and crash evidence); change it only through the functions of this schema';

-- history: each job's last events, seq rising by one per event.
CREATE TABLE "pgstore-v1".history (
  job    text COLLATE "C" NOT NULL,
  seq    bigint      NOT NULL,
  at     timestamptz NOT NULL,
  kind   text        NOT NULL,
  worker text        NOT NULL,
  token  bigint      NOT NULL, -- 0: none
  detail text        NOT NULL,
  PRIMARY KEY (job, seq)
);
COMMENT ON TABLE "pgstore-v1".history IS 'leasectl: the last events of each job';
$step$;
  END IF;
END $leasectl$;
-- lib: helpers of the operations, not called by leasectl itself. They run
-- inside the operations, which are SECURITY DEFINER functions with a safe
-- search_path; called on their own, they have only the caller's rights.
--
-- Every operation takes its job's lock itself (the job's row, FOR NO KEY
-- UPDATE) and writes its history events itself (insert the event numbered
-- jobs.events + 1, delete those beyond the last 20): each plpgsql
-- function a session calls for the first time costs it a compilation and
-- plans, and a run's session calls acquire and release once each.
-- Placeholders: "pgstore-v1" (quoted), 'pgstore-v1' (the namespace as a literal),
-- 1 (the schema version these functions belong to), 20
-- (events kept per job).

-- _us is t in microseconds since the Unix epoch, the unit of every time the
-- functions return (docs/semantics.md, Rules every operation follows).
CREATE OR REPLACE FUNCTION "pgstore-v1"._us(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

-- _micros is a duration of us microseconds.
CREATE OR REPLACE FUNCTION "pgstore-v1"._micros(us bigint) RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$ SELECT us * interval '1 microsecond' $$;

-- _rfc3339 is t in UTC, for history details.
CREATE OR REPLACE FUNCTION "pgstore-v1"._rfc3339(t timestamptz) RETURNS text
LANGUAGE sql STABLE
AS $$ SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"') $$;

-- _check_version raises SQLSTATE LC001, with this schema's version as the
-- detail, when the caller expects another version: leasectl then migrates
-- (or says that it is older than the schema).
CREATE OR REPLACE FUNCTION "pgstore-v1"._check_version(p_version integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF p_version IS DISTINCT FROM 1 THEN
    RAISE EXCEPTION 'leasectl schema % is at version %, the client expects version %', 'pgstore-v1', 1, p_version
      USING ERRCODE = 'LC001', DETAIL = '1';
  END IF;
END $$;

-- _channel is the LISTEN/NOTIFY channel of a job's waiters.
CREATE OR REPLACE FUNCTION "pgstore-v1"._channel(p_job text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT 'leasectl_' || md5('pgstore-v1' || E'\n' || p_job) $$;

-- _quarantine_json describes the job's quarantine.
CREATE OR REPLACE FUNCTION "pgstore-v1"._quarantine_json(j "pgstore-v1".jobs) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('job', j.job, 'since', "pgstore-v1"._us(j.q_since), 'reason', j.q_reason, 'by', j.q_by,
    'crashes', j.q_crashes, 'last_holder', j.q_last_holder, 'last_host', j.q_last_host)
$$;

-- _count_crashes counts the runs of p_jobs as crashes, each exactly once
-- (docs/semantics.md, Counting a crash): the run deleted, crash count + 1,
-- a crashed event, quarantine at the run's own threshold (a quarantined
-- event), waiters notified. With p_expired, only runs whose liveness
-- expired at p_now count, and those whose evidence expired too are dropped
-- uncounted (Acquire, Scan); without it, the runs count whatever their
-- liveness (Release with result crashed). The caller holds the jobs' locks
-- and has read the clock. p_detail is the crashed events' detail; when
-- NULL, it names the liveness expiry and p_by. It is one statement, set by
-- set, so that a scan counts a thousand crashes in one go, in plpgsql, so
-- that a session (the reaper's) plans it once. Returns the crashes, a JSON
-- array ordered by liveness expiry.
CREATE OR REPLACE FUNCTION "pgstore-v1"._count_crashes(p_jobs text[], p_now timestamptz, p_expired boolean,
  p_detail text, p_by text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_crashes json;
BEGIN
  WITH gone AS (
    DELETE FROM "pgstore-v1".runs r
    WHERE r.job = ANY (p_jobs) AND (NOT p_expired OR r.live_until <= p_now)
    RETURNING r.*
  ), crashed AS (
    SELECT g.*, j.crashes + 1 AS crashes, j.events AS seq,
      j.q_since IS NULL AND j.crashes + 1 >= g.max_crashes AS quarantine
    FROM gone g JOIN "pgstore-v1".jobs j ON j.job = g.job
    WHERE g.evidence_until > p_now
  ), counted AS (
    UPDATE "pgstore-v1".jobs j SET crashes = c.crashes,
      events = c.seq + CASE WHEN c.quarantine THEN 2 ELSE 1 END,
      q_since = CASE WHEN c.quarantine THEN p_now ELSE j.q_since END,
      q_by = CASE WHEN c.quarantine THEN 'leasectl' ELSE j.q_by END,
      q_reason = CASE WHEN c.quarantine THEN format('%s consecutive crashes', c.crashes) ELSE j.q_reason END,
      q_crashes = CASE WHEN c.quarantine THEN c.crashes ELSE j.q_crashes END,
      q_last_holder = CASE WHEN c.quarantine THEN c.holder ELSE j.q_last_holder END,
      q_last_host = CASE WHEN c.quarantine THEN c.host ELSE j.q_last_host END
    FROM crashed c WHERE j.job = c.job
  ), recorded AS (
    INSERT INTO "pgstore-v1".history (job, seq, at, kind, worker, token, detail)
    SELECT c.job, c.seq + 1, p_now, 'crashed', c.holder, c.token, coalesce(p_detail,
      format('supervisor vanished: liveness expired at %s, found by %s', "pgstore-v1"._rfc3339(c.live_until), p_by))
    FROM crashed c
    UNION ALL
    SELECT c.job, c.seq + 2, p_now, 'quarantined', c.holder, c.token, format('by leasectl: %s consecutive crashes', c.crashes)
    FROM crashed c WHERE c.quarantine
  ), trimmed AS (
    DELETE FROM "pgstore-v1".history h USING crashed c
    WHERE h.job = c.job AND h.seq <= c.seq + CASE WHEN c.quarantine THEN 2 ELSE 1 END - 20
  )
  SELECT coalesce(json_agg(json_build_object('job', c.job, 'holder', c.holder, 'host', c.host, 'pid', c.pid,
      'token', c.token, 'command', c.command, 'started', "pgstore-v1"._us(c.started), 'stale', "pgstore-v1"._us(c.live_until),
      'detected', "pgstore-v1"._us(p_now), 'crashes', c.crashes, 'quarantined', c.quarantine) ORDER BY c.live_until), '[]')
  INTO v_crashes
  FROM (SELECT c.*, pg_notify("pgstore-v1"._channel(c.job), '') FROM crashed c) c;
  RETURN v_crashes;
END $$;
-- acquire: grant the job's lease (docs/semantics.md, Acquire), in one
-- transaction, the clock read once after the job's lock is taken.
-- Parameters: schema version, job, holder, host, pid, command, ttl (µs),
--   evidence ttl (µs), max crashes, min interval (µs, 0: off).
-- Returns a JSON object; by "k":
--   ok          now, token, attempt, recovered (the crash counted, or null)
--   held        now, holder, host, pid, token, since, expires
--   quarantined now, q (the quarantine)
--   toosoon     now, last_success
-- Times are microseconds since the Unix epoch.
CREATE OR REPLACE FUNCTION "pgstore-v1".acquire(p_version integer, p_job text, p_holder text, p_host text,
  p_pid integer, p_command text[], p_ttl_us bigint, p_evidence_ttl_us bigint, p_max_crashes integer,
  p_min_interval_us bigint) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v1".jobs;
  r "pgstore-v1".runs;
  v_has_run boolean;
  v_now timestamptz;
  v_crash json;
  v_token bigint;
BEGIN
  IF p_version IS DISTINCT FROM 1 THEN
    PERFORM "pgstore-v1"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v1".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    INSERT INTO "pgstore-v1".jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM "pgstore-v1".jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM "pgstore-v1".runs WHERE job = p_job;
  v_has_run := FOUND;

  -- Asked again by the holder of the live lease (its first answer was
  -- lost): the same lease, renewed as renew does. Nothing else changes.
  IF v_has_run AND r.holder = p_holder AND r.live_until > v_now THEN
    UPDATE "pgstore-v1".runs SET live_until = v_now + "pgstore-v1"._micros(p_ttl_us),
      evidence_until = v_now + r.evidence_ttl
    WHERE job = p_job;
    RETURN json_build_object('k', 'ok', 'now', "pgstore-v1"._us(v_now), 'token', r.token, 'attempt', r.attempt);
  END IF;

  IF j.q_since IS NOT NULL THEN
    RETURN json_build_object('k', 'quarantined', 'now', "pgstore-v1"._us(v_now), 'q', "pgstore-v1"._quarantine_json(j));
  END IF;

  IF v_has_run AND r.live_until > v_now THEN
    RETURN json_build_object('k', 'held', 'now', "pgstore-v1"._us(v_now), 'holder', r.holder, 'host', r.host,
      'pid', r.pid, 'token', r.token, 'since', "pgstore-v1"._us(r.started), 'expires', "pgstore-v1"._us(r.live_until));
  END IF;

  -- The run's liveness expired: its crash is counted (or, its evidence
  -- expired too, it is dropped uncounted).
  IF v_has_run THEN
    v_crash := "pgstore-v1"._count_crashes(ARRAY[p_job], v_now, true, NULL, 'acquire') -> 0;
    SELECT * INTO j FROM "pgstore-v1".jobs WHERE job = p_job;
    IF j.q_since IS NOT NULL THEN
      RETURN json_build_object('k', 'quarantined', 'now', "pgstore-v1"._us(v_now), 'q', "pgstore-v1"._quarantine_json(j));
    END IF;
  END IF;

  IF p_min_interval_us > 0 AND j.last_success IS NOT NULL
     AND v_now < j.last_success + "pgstore-v1"._micros(p_min_interval_us) THEN
    RETURN json_build_object('k', 'toosoon', 'now', "pgstore-v1"._us(v_now), 'last_success', "pgstore-v1"._us(j.last_success));
  END IF;

  -- Never below the clock: tokens rise even after the job's rows were
  -- deleted or the tables truncated.
  v_token := greatest(j.last_token + 1, "pgstore-v1"._us(v_now));
  INSERT INTO "pgstore-v1".runs (job, holder, token, host, pid, command, started, attempt, evidence_ttl,
    max_crashes, live_until, evidence_until)
  VALUES (p_job, p_holder, v_token, p_host, p_pid, p_command, v_now, j.attempts + 1,
    "pgstore-v1"._micros(p_evidence_ttl_us), p_max_crashes, v_now + "pgstore-v1"._micros(p_ttl_us),
    v_now + "pgstore-v1"._micros(p_evidence_ttl_us));
  INSERT INTO "pgstore-v1".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'acquired', p_holder, v_token, format('attempt %s on %s pid %s', j.attempts + 1, p_host, p_pid));
  DELETE FROM "pgstore-v1".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  UPDATE "pgstore-v1".jobs SET last_token = v_token, attempts = j.attempts + 1, max_crashes = p_max_crashes,
    last_holder = p_holder, last_host = p_host, events = j.events + 1
  WHERE job = p_job;
  RETURN json_build_object('k', 'ok', 'now', "pgstore-v1"._us(v_now), 'token', v_token, 'attempt', j.attempts + 1,
    'recovered', v_crash);
END $$;
-- renew: extend a live lease (docs/semantics.md, Renew), in one
-- transaction, the clock read once after the job's lock is taken.
-- Parameters: schema version, job, holder, token, ttl (µs).
-- Returns JSON true when renewed, false when the lease is lost (after
-- recording a lease-lost event if the run's own evidence is still there).
CREATE OR REPLACE FUNCTION "pgstore-v1".renew(p_version integer, p_job text, p_holder text, p_token bigint,
  p_ttl_us bigint) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v1".jobs;
  r "pgstore-v1".runs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM 1 THEN
    PERFORM "pgstore-v1"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v1".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM "pgstore-v1".runs WHERE job = p_job AND token = p_token AND holder = p_holder;
  IF NOT FOUND OR r.evidence_until <= v_now THEN
    RETURN 'false';
  END IF;
  IF r.live_until <= v_now THEN
    INSERT INTO "pgstore-v1".history (job, seq, at, kind, worker, token, detail)
    VALUES (p_job, j.events + 1, v_now, 'lease-lost', p_holder, p_token, 'renewal came after the lease expired');
    DELETE FROM "pgstore-v1".history WHERE job = p_job AND seq <= j.events + 1 - 20;
    UPDATE "pgstore-v1".jobs SET events = j.events + 1 WHERE job = p_job;
    RETURN 'false';
  END IF;
  UPDATE "pgstore-v1".runs SET live_until = v_now + "pgstore-v1"._micros(p_ttl_us), evidence_until = v_now + r.evidence_ttl
  WHERE job = p_job;
  RETURN 'true';
END $$;
-- release: end a run with its outcome (docs/semantics.md, Release), in one
-- transaction, the clock read once after the job's lock is taken.
-- Parameters: schema version, job, token, result, exit code, signal,
--   duration (ns), reason, the released or crashed event's detail.
-- Returns JSON true when released, false when the lease is lost (the run's
-- evidence is gone or carries another token); then nothing changed.
CREATE OR REPLACE FUNCTION "pgstore-v1".release(p_version integer, p_job text, p_token bigint, p_result text,
  p_exit_code integer, p_signal integer, p_duration_ns bigint, p_reason text, p_detail text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v1".jobs;
  r "pgstore-v1".runs;
  v_now timestamptz;
  v_completed boolean := p_result = 'completed';
BEGIN
  IF p_version IS DISTINCT FROM 1 THEN
    PERFORM "pgstore-v1"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v1".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM "pgstore-v1".runs WHERE job = p_job AND token = p_token;
  IF NOT FOUND OR r.evidence_until <= v_now THEN
    RETURN 'false';
  END IF;
  UPDATE "pgstore-v1".jobs SET o_result = p_result, o_exit_code = p_exit_code, o_signal = p_signal,
    o_duration_ns = p_duration_ns, o_reason = p_reason, o_worker = r.holder, o_token = r.token, o_finished = v_now,
    crashes = CASE WHEN v_completed THEN 0 ELSE crashes END,
    last_success = CASE WHEN v_completed THEN v_now ELSE last_success END,
    events = CASE WHEN p_result = 'crashed' THEN events ELSE events + 1 END
  WHERE job = p_job;
  IF p_result = 'crashed' THEN
    PERFORM "pgstore-v1"._count_crashes(ARRAY[p_job], v_now, false, p_detail, NULL);
    RETURN 'true';
  END IF;
  INSERT INTO "pgstore-v1".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'released', r.holder, r.token, p_detail);
  DELETE FROM "pgstore-v1".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  DELETE FROM "pgstore-v1".runs WHERE job = p_job;
  PERFORM pg_notify("pgstore-v1"._channel(p_job), '');
  RETURN 'true';
END $$;
-- scan: one batch of the reaper's pass (docs/semantics.md, Scan), in one
-- transaction. It locks the jobs of up to p_batch runs whose liveness
-- expired, oldest first, with FOR UPDATE SKIP LOCKED: a job locked by
-- another transaction (a reaper, an acquire) is left to it, so reapers on
-- several hosts never wait for one another and count each crash once.
-- Each run with its evidence is counted as a crash; one whose evidence
-- expired too is dropped uncounted.
-- Parameters: schema version, batch size.
-- Returns {"now", "examined": runs locked, "crashes": [crash, ...]}.
CREATE OR REPLACE FUNCTION "pgstore-v1".scan(p_version integer, p_batch integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_jobs text[];
BEGIN
  IF p_version IS DISTINCT FROM 1 THEN
    PERFORM "pgstore-v1"._check_version(p_version);
  END IF;
  SELECT array_agg(x.job) INTO v_jobs FROM (
    SELECT j.job FROM "pgstore-v1".runs e JOIN "pgstore-v1".jobs j ON j.job = e.job
    WHERE e.live_until <= v_now
    ORDER BY e.live_until
    LIMIT p_batch
    FOR NO KEY UPDATE OF j SKIP LOCKED) x;
  -- Runs that ended or were renewed since the index was read are left
  -- alone: _count_crashes reads them again, under the jobs' locks.
  RETURN json_build_object('now', "pgstore-v1"._us(v_now), 'examined', coalesce(cardinality(v_jobs), 0),
    'crashes', "pgstore-v1"._count_crashes(coalesce(v_jobs, '{}'), v_now, true, NULL, 'scan'));
END $$;
-- quarantine: an operator's kill switch (docs/semantics.md, Quarantine),
-- for any job, in one transaction.
-- Parameters: schema version, job, by, reason.
-- Returns JSON true.
CREATE OR REPLACE FUNCTION "pgstore-v1".quarantine(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v1".jobs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM 1 THEN
    PERFORM "pgstore-v1"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v1".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    INSERT INTO "pgstore-v1".jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM "pgstore-v1".jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();
  INSERT INTO "pgstore-v1".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'quarantined', p_by, 0, format('by %s: %s', p_by, p_reason));
  DELETE FROM "pgstore-v1".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  UPDATE "pgstore-v1".jobs SET events = j.events + 1, q_since = coalesce(j.q_since, v_now), q_by = p_by,
    q_reason = p_reason, q_crashes = j.crashes,
    q_last_holder = CASE WHEN j.q_since IS NULL THEN j.last_holder ELSE j.q_last_holder END,
    q_last_host = CASE WHEN j.q_since IS NULL THEN j.last_host ELSE j.q_last_host END
  WHERE job = p_job;
  RETURN 'true';
END $$;
-- unquarantine: let a quarantined job run again (docs/semantics.md,
-- ReleaseQuarantine), in one transaction.
-- Parameters: schema version, job, by, reason.
-- Returns JSON true when released, false when the job was not quarantined.
CREATE OR REPLACE FUNCTION "pgstore-v1".unquarantine(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v1".jobs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM 1 THEN
    PERFORM "pgstore-v1"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v1".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND OR j.q_since IS NULL THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  INSERT INTO "pgstore-v1".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'released-from-quarantine', p_by, 0, format('by %s: %s', p_by, p_reason));
  DELETE FROM "pgstore-v1".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  UPDATE "pgstore-v1".jobs SET events = j.events + 1, crashes = 0, q_since = NULL, q_by = NULL, q_reason = NULL,
    q_crashes = NULL, q_last_holder = NULL, q_last_host = NULL
  WHERE job = p_job;
  PERFORM pg_notify("pgstore-v1"._channel(p_job), '');
  RETURN 'true';
END $$;
-- status: one job, read-only (docs/semantics.md, Status), in one statement
-- and so one snapshot, with the clock read once.
-- Parameters: schema version, job.
-- Returns {"now", "job": the record or null, "run": the run or null,
--   "history": [event, ...] oldest first}.
CREATE OR REPLACE FUNCTION "pgstore-v1".status(p_version integer, p_job text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v1"._check_version(p_version))
    SELECT json_build_object(
      'now', "pgstore-v1"._us(c.now),
      'job', (SELECT json_build_object('last_token', j.last_token, 'attempts', j.attempts, 'crashes', j.crashes,
          'max_crashes', j.max_crashes, 'last_success', "pgstore-v1"._us(j.last_success),
          'q', CASE WHEN j.q_since IS NOT NULL THEN "pgstore-v1"._quarantine_json(j) END,
          'o', CASE WHEN j.o_result IS NOT NULL THEN json_build_object('result', j.o_result,
            'exit_code', j.o_exit_code, 'signal', j.o_signal, 'duration_ns', j.o_duration_ns, 'reason', j.o_reason,
            'worker', j.o_worker, 'token', j.o_token, 'finished', "pgstore-v1"._us(j.o_finished)) END)
        FROM "pgstore-v1".jobs j WHERE j.job = p_job),
      'run', (SELECT json_build_object('holder', r.holder, 'host', r.host, 'pid', r.pid, 'token', r.token,
          'attempt', r.attempt, 'command', r.command, 'started', "pgstore-v1"._us(r.started),
          'expires', "pgstore-v1"._us(r.live_until), 'live', r.live_until > c.now, 'evidence', r.evidence_until > c.now)
        FROM "pgstore-v1".runs r WHERE r.job = p_job),
      'history', (SELECT coalesce(json_agg(json_build_object('at', "pgstore-v1"._us(h.at), 'kind', h.kind,
          'worker', h.worker, 'token', h.token, 'detail', h.detail) ORDER BY h.seq), '[]')
        FROM "pgstore-v1".history h WHERE h.job = p_job))
    FROM c);
END $$;
-- leases: the live leases, read-only (docs/semantics.md, Leases), in one
-- statement, through the liveness index.
-- Parameters: schema version.
-- Returns {"now", "leases": [lease, ...] ordered by job, byte by byte}.
CREATE OR REPLACE FUNCTION "pgstore-v1".leases(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v1"._check_version(p_version))
    SELECT json_build_object('now', "pgstore-v1"._us(c.now), 'leases', (
      SELECT coalesce(json_agg(json_build_object('job', r.job, 'holder', r.holder, 'host', r.host, 'pid', r.pid,
          'token', r.token, 'attempt', r.attempt, 'command', r.command, 'started', "pgstore-v1"._us(r.started),
          'expires', "pgstore-v1"._us(r.live_until)) ORDER BY r.job), '[]')
      FROM "pgstore-v1".runs r WHERE r.live_until > c.now))
    FROM c);
END $$;
-- quarantined: the quarantined jobs, read-only (docs/semantics.md,
-- Quarantined), through the partial index of quarantined jobs.
-- Parameters: schema version.
-- Returns [quarantine, ...] ordered by job, byte by byte.
CREATE OR REPLACE FUNCTION "pgstore-v1".quarantined(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT "pgstore-v1"._check_version(p_version))
    SELECT coalesce(json_agg("pgstore-v1"._quarantine_json(j) ORDER BY j.job), '[]')
    FROM c, "pgstore-v1".jobs j WHERE j.q_since IS NOT NULL);
END $$;
-- counts: store-wide gauges, read-only (docs/semantics.md, Counts).
-- Parameters: schema version.
-- Returns {"inflight": live runs, "quarantined": quarantined jobs}.
CREATE OR REPLACE FUNCTION "pgstore-v1".counts(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v1"._check_version(p_version))
    SELECT json_build_object(
      'inflight', (SELECT count(*) FROM "pgstore-v1".runs r WHERE r.live_until > c.now),
      'quarantined', (SELECT count(*) FROM "pgstore-v1".jobs j WHERE j.q_since IS NOT NULL))
    FROM c);
END $$;
-- checktoken: is the job's current token live? Read-only
-- (docs/semantics.md, CheckToken).
-- Parameters: schema version, job.
-- Returns {"current": the job's last token (0: none), "live": whether the
--   run of that token is live}.
CREATE OR REPLACE FUNCTION "pgstore-v1".checktoken(p_version integer, p_job text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v1"._check_version(p_version))
    SELECT json_build_object('current', coalesce(j.last_token, 0),
      'live', coalesce(r.live_until > c.now AND r.token = j.last_token, false))
    FROM c LEFT JOIN "pgstore-v1".jobs j ON j.job = p_job LEFT JOIN "pgstore-v1".runs r ON r.job = p_job);
END $$;
UPDATE "pgstore-v1".meta SET version = 1, migrated_at = clock_timestamp();
COMMIT;

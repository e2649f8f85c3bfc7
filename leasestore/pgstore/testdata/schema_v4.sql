-- The schema at version 4, as leasectl at commit 9fcaa4f made it for namespace
-- pgstore-v4 (`leasectl store migrate --sql`), for TestMigrationFromVersion4:
-- a database an earlier leasectl left must migrate with its data intact.
-- Never regenerate it from a later leasectl.
-- leasectl: schema "pgstore-v4" at version 4. Run it as the role that owns the schema.
BEGIN;
SELECT pg_advisory_xact_lock(-8370563824623466501);
DO $leasectl$ BEGIN
  IF NOT EXISTS (SELECT FROM pg_namespace WHERE nspname = 'pgstore-v4') THEN
    CREATE SCHEMA "pgstore-v4";
  END IF;
END $leasectl$;
CREATE TABLE IF NOT EXISTS "pgstore-v4".meta (version integer NOT NULL, migrated_at timestamptz NOT NULL DEFAULT clock_timestamp());
COMMENT ON TABLE "pgstore-v4".meta IS 'leasectl: the schema version';
INSERT INTO "pgstore-v4".meta (version) SELECT 0 WHERE NOT EXISTS (SELECT FROM "pgstore-v4".meta);
SELECT version AS previous_version FROM "pgstore-v4".meta;
DO $leasectl$
DECLARE
  v integer;
BEGIN
  SELECT version INTO v FROM "pgstore-v4".meta;
  IF v > 4 THEN
    RAISE EXCEPTION 'schema %s is at version %s, newer than this leasectl''s 4', 'pgstore-v4', v
      USING ERRCODE = 'LC002', DETAIL = v::text;
  END IF;
  IF v < 1 THEN
    EXECUTE $step$
-- Migration to schema version 1: the tables. Placeholders: "pgstore-v4" (the
-- namespace's schema, quoted). Times are timestamptz from the server's
-- clock_timestamp(); job IDs compare and sort byte by byte (COLLATE "C").

-- jobs: one row per job ever seen, its record (docs/design.md §5). The row
-- is the job's lock: every transition takes it FOR NO KEY UPDATE first.
CREATE TABLE "pgstore-v4".jobs (
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
CREATE INDEX jobs_quarantined ON "pgstore-v4".jobs (job) WHERE q_since IS NOT NULL;
COMMENT ON TABLE "pgstore-v4".jobs IS 'leasectl: one row per job, its record; change it only through the functions of this schema';

-- runs: the current run of a job, its liveness (until live_until) and its
-- evidence (until evidence_until); deleted when the run ends or its crash
-- is counted. Indexed by liveness expiry, so that a scan reads the expired
-- runs only.
CREATE TABLE "pgstore-v4".runs (
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
CREATE INDEX runs_live_until ON "pgstore-v4".runs (live_until);
COMMENT ON TABLE "pgstore-v4".runs IS 'leasectl: runs in flight (liveness and crash evidence); change it only through the functions of this schema';

-- history: each job's last events, seq rising by one per event.
CREATE TABLE "pgstore-v4".history (
  job    text COLLATE "C" NOT NULL,
  seq    bigint      NOT NULL,
  at     timestamptz NOT NULL,
  kind   text        NOT NULL,
  worker text        NOT NULL,
  token  bigint      NOT NULL, -- 0: none
  detail text        NOT NULL,
  PRIMARY KEY (job, seq)
);
COMMENT ON TABLE "pgstore-v4".history IS 'leasectl: the last events of each job';
$step$;
  END IF;
  IF v < 2 THEN
    EXECUTE $step$
-- Migration from schema version 1 to 2: seed 002's regions, the holders'
-- renewal round trips and the holder that gave up on its grant
-- (docs/semantics.md, Acquire, Renew and RecordLate). Placeholders:
-- "pgstore-v4" (the namespace's schema, quoted). Every column is added with a
-- constant default, which PostgreSQL records without rewriting the tables.

-- region: the job's region, recorded by its first grant that names one;
-- NULL: none recorded, and any region may take the job.
ALTER TABLE "pgstore-v4".jobs ADD COLUMN region text;

-- gave_up: the last holder that gave up on its grant (recordlate with
-- token 0), whose acquire arriving later is refused; NULL: none.
ALTER TABLE "pgstore-v4".jobs ADD COLUMN gave_up text;

-- rtt_us: the round trip of the holder's last renewal as it reported it,
-- in µs; 0: none yet. A new grant is a new row, so it starts without one.
ALTER TABLE "pgstore-v4".runs ADD COLUMN rtt_us bigint NOT NULL DEFAULT 0;

-- Version 1's acquire and renew take fewer arguments than version 2's, so
-- CREATE OR REPLACE would leave them beside the new ones, and a version 1
-- client calling them would pass their version check and grant with
-- version 1's rules (no region, no deadline). Dropped, its call fails and
-- its migration then says that the schema is newer than it. _rfc3339 was
-- for version 1's history details.
DROP FUNCTION IF EXISTS "pgstore-v4".acquire(integer, text, text, text, integer, text[], bigint, bigint, integer, bigint);
DROP FUNCTION IF EXISTS "pgstore-v4".renew(integer, text, text, bigint, bigint);
DROP FUNCTION IF EXISTS "pgstore-v4"._rfc3339(timestamptz);
$step$;
  END IF;
  IF v < 3 THEN
    EXECUTE $step$
-- Migration from schema version 2 to 3: an operator's request that a run
-- stop, and the outcome a history event carries (docs/semantics.md, Stop
-- and History events). Placeholders: "pgstore-v4" (the namespace's schema,
-- quoted). Every column is added without a default, which PostgreSQL
-- records without rewriting the tables.

-- stop_by, stop_reason, stop_at: who asked the run to stop, why, and when
-- (the stop function); NULL: nobody. A new grant is a new row, so it starts
-- without one.
ALTER TABLE "pgstore-v4".runs ADD COLUMN stop_by text, ADD COLUMN stop_reason text, ADD COLUMN stop_at timestamptz;

-- result: the run's outcome on a released or late-outcome event, and on a
-- crashed event of a run that released itself as crashed, which recordlate
-- reads (a completion ends a crash streak; a crashed outcome recorded in
-- time is no absence to undo); NULL on other events. The events version 2
-- recorded get theirs from their detail, whose first word it was.
ALTER TABLE "pgstore-v4".history ADD COLUMN result text;
UPDATE "pgstore-v4".history SET result = split_part(detail, ' ', 1)
WHERE kind IN ('released', 'crashed', 'late-outcome')
  AND split_part(detail, ' ', 1) IN ('completed', 'failed', 'crashed', 'not-started');
$step$;
  END IF;
  IF v < 4 THEN
    EXECUTE $step$
-- Migration from schema version 3 to 4: a job's expectation, how often it
-- must complete successfully (docs/semantics.md, Expect and Overdue).
-- Placeholders: "pgstore-v4" (the namespace's schema, quoted).

-- x_every_us, x_grace_us, x_since: the expectation's period and grace (µs)
-- and since when it holds; NULL: none.
ALTER TABLE "pgstore-v4".jobs ADD COLUMN x_every_us bigint, ADD COLUMN x_grace_us bigint, ADD COLUMN x_since timestamptz;

-- _due is when a job becomes overdue: its last success, or since when its
-- expectation holds if it never succeeded, plus every and grace; NULL
-- without an expectation. IMMUTABLE, as a generated column needs, and
-- truly so: adding whole microseconds to a timestamptz does not depend on
-- the time zone (only months and days would). Made here, not with the
-- other functions: the column below depends on it.
CREATE OR REPLACE FUNCTION "pgstore-v4"._due(p_last_success timestamptz, p_since timestamptz, p_every_us bigint, p_grace_us bigint)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
  SELECT coalesce(p_last_success, p_since) + (p_every_us + p_grace_us) * interval '1 microsecond'
$$;

-- due_at: _due of the row, kept by PostgreSQL itself whatever function
-- changes the last success or the expectation, and indexed, so that
-- overdue reads the overdue jobs only. Adding it rewrites the jobs table
-- once, under the migration's lock.
ALTER TABLE "pgstore-v4".jobs ADD COLUMN due_at timestamptz
  GENERATED ALWAYS AS ("pgstore-v4"._due(last_success, x_since, x_every_us, x_grace_us)) STORED;
CREATE INDEX jobs_due_at ON "pgstore-v4".jobs (due_at) WHERE due_at IS NOT NULL;

-- Version 3's acquire takes fewer arguments than version 4's (the run's
-- expectation): dropped, as version 2 dropped version 1's, so that a
-- version 3 client's call fails and its migration says the schema is newer.
DROP FUNCTION IF EXISTS "pgstore-v4".acquire(integer, text, text, text, integer, text[], bigint, bigint, integer, bigint, text, bigint);
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
-- Placeholders: "pgstore-v4" (quoted), 'pgstore-v4' (the namespace as a literal),
-- 4 (the schema version these functions belong to), 20
-- (events kept per job).

-- _us is t in microseconds since the Unix epoch, the unit of every time the
-- functions return (docs/semantics.md, Rules every operation follows).
CREATE OR REPLACE FUNCTION "pgstore-v4"._us(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE
AS $$ SELECT (extract(epoch FROM t) * 1000000)::bigint $$;

-- _micros is a duration of us microseconds.
CREATE OR REPLACE FUNCTION "pgstore-v4"._micros(us bigint) RETURNS interval
LANGUAGE sql IMMUTABLE
AS $$ SELECT us * interval '1 microsecond' $$;

-- _check_version raises SQLSTATE LC001, with this schema's version as the
-- detail, when the caller expects another version: leasectl then migrates
-- (or says that it is older than the schema).
CREATE OR REPLACE FUNCTION "pgstore-v4"._check_version(p_version integer) RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    RAISE EXCEPTION 'leasectl schema % is at version %, the client expects version %', 'pgstore-v4', 4, p_version
      USING ERRCODE = 'LC001', DETAIL = '4';
  END IF;
END $$;

-- _channel is the LISTEN/NOTIFY channel of a job's waiters.
CREATE OR REPLACE FUNCTION "pgstore-v4"._channel(p_job text) RETURNS text
LANGUAGE sql IMMUTABLE
AS $$ SELECT 'leasectl_' || md5('pgstore-v4' || E'\n' || p_job) $$;

-- _publish_token tells the namespace's token feeds (tokenfeed.go) that the
-- job's token changed: a grant ('g') or the end of a run ('e'), the token,
-- a space and the job, on the namespace's one token channel, so that a
-- feed listens once for all its jobs. Like every NOTIFY it is delivered
-- only if the transaction commits, in commit order.
CREATE OR REPLACE FUNCTION "pgstore-v4"._publish_token(p_kind text, p_token bigint, p_job text) RETURNS void
LANGUAGE sql
AS $$ SELECT pg_notify('leasectl_tokens_' || md5('pgstore-v4'), p_kind || p_token || ' ' || p_job) $$;

-- _quarantine_json describes the job's quarantine.
CREATE OR REPLACE FUNCTION "pgstore-v4"._quarantine_json(j "pgstore-v4".jobs) RETURNS json
LANGUAGE sql STABLE AS $$
  SELECT json_build_object('job', j.job, 'since', "pgstore-v4"._us(j.q_since), 'reason', j.q_reason, 'by', j.q_by,
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
CREATE OR REPLACE FUNCTION "pgstore-v4"._count_crashes(p_jobs text[], p_now timestamptz, p_expired boolean,
  p_detail text, p_by text) RETURNS json
LANGUAGE plpgsql AS $$
DECLARE
  v_crashes json;
BEGIN
  WITH gone AS (
    DELETE FROM "pgstore-v4".runs r
    WHERE r.job = ANY (p_jobs) AND (NOT p_expired OR r.live_until <= p_now)
    RETURNING r.*
  ), crashed AS (
    SELECT g.*, j.crashes + 1 AS crashes, j.events AS seq,
      j.q_since IS NULL AND j.crashes + 1 >= g.max_crashes AS quarantine
    FROM gone g JOIN "pgstore-v4".jobs j ON j.job = g.job
    WHERE g.evidence_until > p_now
  ), counted AS (
    UPDATE "pgstore-v4".jobs j SET crashes = c.crashes,
      events = c.seq + CASE WHEN c.quarantine THEN 2 ELSE 1 END,
      q_since = CASE WHEN c.quarantine THEN p_now ELSE j.q_since END,
      q_by = CASE WHEN c.quarantine THEN 'leasectl' ELSE j.q_by END,
      q_reason = CASE WHEN c.quarantine THEN format('%s consecutive crashes', c.crashes) ELSE j.q_reason END,
      q_crashes = CASE WHEN c.quarantine THEN c.crashes ELSE j.q_crashes END,
      q_last_holder = CASE WHEN c.quarantine THEN c.holder ELSE j.q_last_holder END,
      q_last_host = CASE WHEN c.quarantine THEN c.host ELSE j.q_last_host END
    FROM crashed c WHERE j.job = c.job
  ), recorded AS (
    INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, result, detail)
    SELECT c.job, c.seq + 1, p_now, 'crashed', c.holder, c.token, CASE WHEN p_detail IS NOT NULL THEN 'crashed' END,
      coalesce(p_detail,
      'supervisor vanished: liveness expired, found by ' || p_by)
    FROM crashed c
    UNION ALL
    SELECT c.job, c.seq + 2, p_now, 'quarantined', c.holder, c.token, NULL, format('by leasectl: %s consecutive crashes', c.crashes)
    FROM crashed c WHERE c.quarantine
  ), trimmed AS (
    DELETE FROM "pgstore-v4".history h USING crashed c
    WHERE h.job = c.job AND h.seq <= c.seq + CASE WHEN c.quarantine THEN 2 ELSE 1 END - 20
  )
  SELECT coalesce(json_agg(json_build_object('job', c.job, 'holder', c.holder, 'host', c.host, 'pid', c.pid,
      'token', c.token, 'command', c.command, 'started', "pgstore-v4"._us(c.started), 'stale', "pgstore-v4"._us(c.live_until),
      'detected', "pgstore-v4"._us(p_now), 'crashes', c.crashes, 'quarantined', c.quarantine) ORDER BY c.live_until), '[]')
  INTO v_crashes
  FROM (SELECT c.*, pg_notify("pgstore-v4"._channel(c.job), ''), "pgstore-v4"._publish_token('e', c.token, c.job)
    FROM crashed c) c;
  RETURN v_crashes;
END $$;
-- acquire: grant the job's lease (docs/semantics.md, Acquire), in one
-- transaction, the clock read once after the job's lock is taken.
-- Parameters: schema version, job, holder, host, pid, command, ttl (µs),
--   evidence ttl (µs), max crashes, min interval (µs, 0: off), region
--   ('': none), deadline (µs, 0: none), expectation every and grace (µs;
--   NULL: none).
-- Returns a JSON object; by "k":
--   gaveup      now (the holder gave up on its grant: recordlate.sql)
--   ok          now, token, attempt, recovered (the crash counted, or null)
--   held        now, holder, host, pid, token, since, expires
--   quarantined now, q (the quarantine)
--   region      now, region (the job's)
--   deadline    now
--   toosoon     now, last_success
-- Times are microseconds since the Unix epoch.
CREATE OR REPLACE FUNCTION "pgstore-v4".acquire(p_version integer, p_job text, p_holder text, p_host text,
  p_pid integer, p_command text[], p_ttl_us bigint, p_evidence_ttl_us bigint, p_max_crashes integer,
  p_min_interval_us bigint, p_region text, p_deadline_us bigint, p_expect_every_us bigint,
  p_expect_grace_us bigint) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v4".jobs;
  r "pgstore-v4".runs;
  v_has_run boolean;
  v_now timestamptz;
  v_crash json;
  v_token bigint;
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    INSERT INTO "pgstore-v4".jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM "pgstore-v4".runs WHERE job = p_job;
  v_has_run := FOUND;

  -- The holder gave up on its grant (recordlate with token 0): its request,
  -- arriving now, would grant a lease nobody runs.
  IF j.gave_up = p_holder THEN
    RETURN json_build_object('k', 'gaveup', 'now', "pgstore-v4"._us(v_now));
  END IF;

  -- Asked again by the holder of the live lease (its first answer was
  -- lost): the same lease, renewed as renew does. Nothing else changes.
  IF v_has_run AND r.holder = p_holder AND r.live_until > v_now THEN
    UPDATE "pgstore-v4".runs SET live_until = v_now + "pgstore-v4"._micros(p_ttl_us),
      evidence_until = v_now + r.evidence_ttl
    WHERE job = p_job;
    RETURN json_build_object('k', 'ok', 'now', "pgstore-v4"._us(v_now), 'token', r.token, 'attempt', r.attempt);
  END IF;

  IF j.q_since IS NOT NULL THEN
    RETURN json_build_object('k', 'quarantined', 'now', "pgstore-v4"._us(v_now), 'q', "pgstore-v4"._quarantine_json(j));
  END IF;

  -- Another region's request: refused whether the job is held or free.
  IF p_region <> '' AND j.region IS NOT NULL AND j.region <> p_region THEN
    RETURN json_build_object('k', 'region', 'now', "pgstore-v4"._us(v_now), 'region', j.region);
  END IF;

  IF v_has_run AND r.live_until > v_now THEN
    RETURN json_build_object('k', 'held', 'now', "pgstore-v4"._us(v_now), 'holder', r.holder, 'host', r.host,
      'pid', r.pid, 'token', r.token, 'since', "pgstore-v4"._us(r.started), 'expires', "pgstore-v4"._us(r.live_until));
  END IF;

  -- The run's liveness expired: its crash is counted (or, its evidence
  -- expired too, it is dropped uncounted).
  IF v_has_run THEN
    v_crash := "pgstore-v4"._count_crashes(ARRAY[p_job], v_now, true, NULL, 'acquire') -> 0;
    SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job;
    IF j.q_since IS NOT NULL THEN
      RETURN json_build_object('k', 'quarantined', 'now', "pgstore-v4"._us(v_now), 'q', "pgstore-v4"._quarantine_json(j));
    END IF;
  END IF;

  -- Past the deadline: refused, the crash counted above stays counted.
  IF p_deadline_us <> 0 AND "pgstore-v4"._us(v_now) > p_deadline_us THEN
    RETURN json_build_object('k', 'deadline', 'now', "pgstore-v4"._us(v_now));
  END IF;

  IF p_min_interval_us > 0 AND j.last_success IS NOT NULL
     AND v_now < j.last_success + "pgstore-v4"._micros(p_min_interval_us) THEN
    RETURN json_build_object('k', 'toosoon', 'now', "pgstore-v4"._us(v_now), 'last_success', "pgstore-v4"._us(j.last_success));
  END IF;

  -- Never below the clock: tokens rise even after the job's rows were
  -- deleted or the tables truncated.
  v_token := greatest(j.last_token + 1, "pgstore-v4"._us(v_now));
  INSERT INTO "pgstore-v4".runs (job, holder, token, host, pid, command, started, attempt, evidence_ttl,
    max_crashes, live_until, evidence_until)
  VALUES (p_job, p_holder, v_token, p_host, p_pid, p_command, v_now, j.attempts + 1,
    "pgstore-v4"._micros(p_evidence_ttl_us), p_max_crashes, v_now + "pgstore-v4"._micros(p_ttl_us),
    v_now + "pgstore-v4"._micros(p_evidence_ttl_us));
  -- The detail leaves out host and pid (docs/semantics.md, History events):
  -- the run's row has them while it lasts, and the default worker ID
  -- (host:pid:random) keeps them in every event.
  INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'acquired', p_holder, v_token, 'attempt ' || (j.attempts + 1));
  DELETE FROM "pgstore-v4".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  UPDATE "pgstore-v4".jobs SET last_token = v_token, attempts = j.attempts + 1, max_crashes = p_max_crashes,
    last_holder = p_holder, last_host = p_host, events = j.events + 1,
    region = coalesce(j.region, nullif(p_region, ''))
  WHERE job = p_job;
  IF p_expect_every_us IS NOT NULL THEN
    PERFORM "pgstore-v4"._expect(p_job, p_expect_every_us, p_expect_grace_us, v_now);
  END IF;
  -- Token feeds hear of the grant; waiters do not (nothing was freed).
  PERFORM "pgstore-v4"._publish_token('g', v_token, p_job);
  RETURN json_build_object('k', 'ok', 'now', "pgstore-v4"._us(v_now), 'token', v_token, 'attempt', j.attempts + 1,
    'recovered', v_crash);
END $$;
-- renew: extend a live lease (docs/semantics.md, Renew), in one
-- transaction, the clock read once after the job's lock is taken.
-- Parameters: schema version, job, holder, token, ttl (µs), the holder's
--   last renewal round trip (µs; 0: not measured, the one kept stays).
-- Returns JSON true when renewed, {"stop_by", "stop_reason", "stop_at"}
-- when renewed and an operator asked the run to stop (the stop function),
-- false when the lease is lost (after recording a lease-lost event if the
-- run's own evidence is still there).
CREATE OR REPLACE FUNCTION "pgstore-v4".renew(p_version integer, p_job text, p_holder text, p_token bigint,
  p_ttl_us bigint, p_rtt_us bigint) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v4".jobs;
  r "pgstore-v4".runs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM "pgstore-v4".runs WHERE job = p_job AND token = p_token AND holder = p_holder;
  IF NOT FOUND OR r.evidence_until <= v_now THEN
    RETURN 'false';
  END IF;
  IF r.live_until <= v_now THEN
    INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, detail)
    VALUES (p_job, j.events + 1, v_now, 'lease-lost', p_holder, p_token, 'renewal came after the lease expired');
    DELETE FROM "pgstore-v4".history WHERE job = p_job AND seq <= j.events + 1 - 20;
    UPDATE "pgstore-v4".jobs SET events = j.events + 1 WHERE job = p_job;
    RETURN 'false';
  END IF;
  UPDATE "pgstore-v4".runs SET live_until = v_now + "pgstore-v4"._micros(p_ttl_us), evidence_until = v_now + r.evidence_ttl,
    rtt_us = CASE WHEN p_rtt_us > 0 THEN p_rtt_us ELSE r.rtt_us END
  WHERE job = p_job;
  IF r.stop_by IS NOT NULL THEN
    RETURN json_build_object('stop_by', r.stop_by, 'stop_reason', r.stop_reason, 'stop_at', "pgstore-v4"._us(r.stop_at));
  END IF;
  RETURN 'true';
END $$;
-- release: end a run with its outcome (docs/semantics.md, Release), in one
-- transaction, the clock read once after the job's lock is taken.
-- Parameters: schema version, job, token, result, exit code, signal,
--   duration (ns), reason, the released or crashed event's detail.
-- Returns JSON true when released, false when the lease is lost (the run's
-- evidence is gone or carries another token); then nothing changed.
CREATE OR REPLACE FUNCTION "pgstore-v4".release(p_version integer, p_job text, p_token bigint, p_result text,
  p_exit_code integer, p_signal integer, p_duration_ns bigint, p_reason text, p_detail text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v4".jobs;
  r "pgstore-v4".runs;
  v_now timestamptz;
  v_completed boolean := p_result = 'completed';
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM "pgstore-v4".runs WHERE job = p_job AND token = p_token;
  IF NOT FOUND OR r.evidence_until <= v_now THEN
    RETURN 'false';
  END IF;
  UPDATE "pgstore-v4".jobs SET o_result = p_result, o_exit_code = p_exit_code, o_signal = p_signal,
    o_duration_ns = p_duration_ns, o_reason = p_reason, o_worker = r.holder, o_token = r.token, o_finished = v_now,
    crashes = CASE WHEN v_completed THEN 0 ELSE crashes END,
    last_success = CASE WHEN v_completed THEN v_now ELSE last_success END,
    events = CASE WHEN p_result = 'crashed' THEN events ELSE events + 1 END
  WHERE job = p_job;
  IF p_result = 'crashed' THEN
    PERFORM "pgstore-v4"._count_crashes(ARRAY[p_job], v_now, false, p_detail, NULL);
    RETURN 'true';
  END IF;
  INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, result, detail)
  VALUES (p_job, j.events + 1, v_now, 'released', r.holder, r.token, p_result, p_detail);
  DELETE FROM "pgstore-v4".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  DELETE FROM "pgstore-v4".runs WHERE job = p_job;
  PERFORM pg_notify("pgstore-v4"._channel(p_job), '');
  PERFORM "pgstore-v4"._publish_token('e', r.token, p_job);
  RETURN 'true';
END $$;
-- recordlate: record the outcome of a run that did not reach the store in
-- time, and undo what its absence did (docs/semantics.md, RecordLate), in
-- one transaction, the clock read once after the job's lock is taken. The
-- history walk is package rules' (RecordLate), in plpgsql, so that the whole
-- correction is one call under the job's lock, as every other transition.
-- Parameters: schema version, job, holder, token (0: its holder never
--   learned it, and gave up), result, exit code, signal, duration (ns),
--   reason, the outcome's history detail.
-- Returns {"released", "withdrawn", "lifted": booleans, "crashes": the
--   consecutive crashes afterwards}.
CREATE OR REPLACE FUNCTION "pgstore-v4".recordlate(p_version integer, p_job text, p_holder text, p_token bigint,
  p_result text, p_exit_code integer, p_signal integer, p_duration_ns bigint, p_reason text, p_detail text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v4".jobs;
  r "pgstore-v4".runs;
  h "pgstore-v4".history;
  v_now timestamptz;
  v_token bigint := p_token;   -- the run's token, from its events when p_token is 0
  v_crashed bigint;            -- seq of the run's crashed event
  v_crashed_at timestamptz;
  v_started timestamptz;       -- from the run's acquired event
  v_recorded boolean := false; -- the run's outcome is in the history already
  v_withdrawn boolean := false;
  v_lifted boolean := false;
  v_crashes integer;
  v_detail text := p_detail;
  v_seq bigint;
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    IF p_token <> 0 THEN
      RETURN json_build_object('released', false, 'withdrawn', false, 'lifted', false, 'crashes', 0);
    END IF;
    -- Gave up before its grant arrived: the job's row keeps the holder.
    INSERT INTO "pgstore-v4".jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();

  -- A holder that gave up on its grant: its acquire, arriving later, is
  -- refused (acquire.sql). Only the last one is kept.
  IF p_token = 0 AND j.gave_up IS DISTINCT FROM p_holder THEN
    UPDATE "pgstore-v4".jobs SET gave_up = p_holder WHERE job = p_job;
  END IF;

  -- 1. The run's evidence is there: exactly a release (its waiters and the
  -- token feeds hear of it there).
  SELECT * INTO r FROM "pgstore-v4".runs
  WHERE job = p_job AND holder = p_holder AND (p_token = 0 OR token = p_token) AND evidence_until > v_now;
  IF FOUND THEN
    PERFORM "pgstore-v4".release(4, p_job, r.token, p_result, p_exit_code, p_signal, p_duration_ns, p_reason,
      p_detail);
    RETURN json_build_object('released', true, 'withdrawn', false, 'lifted', false,
      'crashes', (SELECT crashes FROM "pgstore-v4".jobs WHERE job = p_job));
  END IF;

  -- 2. The run's events, oldest first: its crash, its start, its release.
  FOR h IN SELECT * FROM "pgstore-v4".history WHERE job = p_job ORDER BY seq LOOP
    CONTINUE WHEN h.worker <> p_holder OR (p_token <> 0 AND h.token <> p_token);
    IF h.kind = 'crashed' AND h.result IS NOT NULL THEN
      -- It released itself as crashed: its outcome is recorded, and the
      -- crash counted for it is no absence to undo.
      v_token := h.token;
      v_recorded := true;
    ELSIF h.kind = 'crashed' THEN
      v_crashed := h.seq;
      v_crashed_at := h.at;
      v_token := h.token;
    ELSIF h.kind = 'acquired' THEN
      v_started := h.at;
      v_token := h.token;
    ELSIF h.kind = 'released' THEN
      -- Released in time after all, or by an earlier delivery of this one
      -- while its evidence was there.
      v_token := h.token;
      v_recorded := true;
    END IF;
  END LOOP;
  v_recorded := v_recorded OR EXISTS (SELECT FROM "pgstore-v4".history x
    WHERE x.job = p_job AND x.kind = 'late-outcome' AND x.worker = p_holder AND x.token = v_token);
  IF v_recorded OR v_token = 0 OR v_token > j.last_token THEN
    -- 3. Nothing to correct, nothing to add.
    RETURN json_build_object('released', false, 'withdrawn', false, 'lifted', false, 'crashes', j.crashes);
  END IF;

  -- The crash counted for the run still counts unless a completed run, or
  -- an operator's release from quarantine, came after it.
  v_crashes := j.crashes;
  IF v_crashed IS NOT NULL AND NOT EXISTS (SELECT FROM "pgstore-v4".history x
      WHERE x.job = p_job AND x.seq > v_crashed AND (
        (x.kind = 'released' AND x.result = 'completed')
        OR (x.kind = 'late-outcome' AND x.result = 'completed' AND x.token > v_token)
        OR (x.kind = 'released-from-quarantine' AND x.worker <> 'leasectl'))) THEN
    v_withdrawn := true;
    IF p_result = 'completed' THEN
      -- A completion at this run's place would have left only the crashes
      -- counted after it, less those withdrawn since.
      SELECT count(*) INTO v_crashes FROM "pgstore-v4".history c
      WHERE c.job = p_job AND c.seq > v_crashed AND c.kind = 'crashed' AND NOT EXISTS (SELECT FROM "pgstore-v4".history x
        WHERE x.job = p_job AND x.kind = 'late-outcome' AND x.worker = c.worker AND x.token = c.token);
      IF v_started IS NOT NULL THEN
        UPDATE "pgstore-v4".jobs SET last_success = greatest(last_success, v_started + "pgstore-v4"._micros(p_duration_ns / 1000))
        WHERE job = p_job;
      END IF;
    ELSE
      v_crashes := greatest(0, j.crashes - 1);
    END IF;
    v_detail := v_detail || '; the crash counted for it is withdrawn';
  END IF;

  v_seq := j.events;
  -- Without the withdrawn crash, the streak in which leasectl quarantined
  -- the job falls short of the threshold: the quarantine is lifted. An
  -- operator's quarantine stays.
  IF v_withdrawn AND j.q_since IS NOT NULL AND j.q_by = 'leasectl' AND j.q_since >= v_crashed_at
     AND v_crashes < j.max_crashes THEN
    v_lifted := true;
    v_seq := v_seq + 1;
    INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, detail)
    VALUES (p_job, v_seq, v_now, 'released-from-quarantine', 'leasectl', 0,
      format('by leasectl: the crash of token %s that led to it was withdrawn: its outcome arrived late', v_token));
    UPDATE "pgstore-v4".jobs SET q_since = NULL, q_by = NULL, q_reason = NULL, q_crashes = NULL, q_last_holder = NULL,
      q_last_host = NULL
    WHERE job = p_job;
    v_detail := v_detail || '; the quarantine it led to is lifted';
    PERFORM pg_notify("pgstore-v4"._channel(p_job), '');
  END IF;
  v_seq := v_seq + 1;
  INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, result, detail)
  VALUES (p_job, v_seq, v_now, 'late-outcome', p_holder, v_token, p_result, v_detail);
  DELETE FROM "pgstore-v4".history WHERE job = p_job AND seq <= v_seq - 20;
  -- Finished now: after the crash counted for the run, which Status readers
  -- compare it with; unless a later run's outcome is recorded.
  IF j.o_token IS NULL OR j.o_token < v_token THEN
    UPDATE "pgstore-v4".jobs SET o_result = p_result, o_exit_code = p_exit_code, o_signal = p_signal,
      o_duration_ns = p_duration_ns, o_reason = p_reason, o_worker = p_holder, o_token = v_token, o_finished = v_now
    WHERE job = p_job;
  END IF;
  UPDATE "pgstore-v4".jobs SET crashes = v_crashes, events = v_seq WHERE job = p_job;
  RETURN json_build_object('released', false, 'withdrawn', v_withdrawn, 'lifted', v_lifted, 'crashes', v_crashes);
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
CREATE OR REPLACE FUNCTION "pgstore-v4".scan(p_version integer, p_batch integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_jobs text[];
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT array_agg(x.job) INTO v_jobs FROM (
    SELECT j.job FROM "pgstore-v4".runs e JOIN "pgstore-v4".jobs j ON j.job = e.job
    WHERE e.live_until <= v_now
    ORDER BY e.live_until
    LIMIT p_batch
    FOR NO KEY UPDATE OF j SKIP LOCKED) x;
  -- Runs that ended or were renewed since the index was read are left
  -- alone: _count_crashes reads them again, under the jobs' locks.
  RETURN json_build_object('now', "pgstore-v4"._us(v_now), 'examined', coalesce(cardinality(v_jobs), 0),
    'crashes', "pgstore-v4"._count_crashes(coalesce(v_jobs, '{}'), v_now, true, NULL, 'scan'));
END $$;
-- quarantine: an operator's kill switch (docs/semantics.md, Quarantine),
-- for any job, in one transaction.
-- Parameters: schema version, job, by, reason.
-- Returns JSON true.
CREATE OR REPLACE FUNCTION "pgstore-v4".quarantine(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v4".jobs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    INSERT INTO "pgstore-v4".jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();
  INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'quarantined', p_by, 0, format('by %s: %s', p_by, p_reason));
  DELETE FROM "pgstore-v4".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  UPDATE "pgstore-v4".jobs SET events = j.events + 1, q_since = coalesce(j.q_since, v_now), q_by = p_by,
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
CREATE OR REPLACE FUNCTION "pgstore-v4".unquarantine(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v4".jobs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND OR j.q_since IS NULL THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'released-from-quarantine', p_by, 0, format('by %s: %s', p_by, p_reason));
  DELETE FROM "pgstore-v4".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  UPDATE "pgstore-v4".jobs SET events = j.events + 1, crashes = 0, q_since = NULL, q_by = NULL, q_reason = NULL,
    q_crashes = NULL, q_last_holder = NULL, q_last_host = NULL
  WHERE job = p_job;
  PERFORM pg_notify("pgstore-v4"._channel(p_job), '');
  RETURN 'true';
END $$;
-- stop: an operator's request that the job's running child stop
-- (docs/semantics.md, Stop), in one transaction. The holder's next renew
-- returns it.
-- Parameters: schema version, job, by, reason.
-- Returns JSON true when the request is recorded, false when no run is
-- live.
CREATE OR REPLACE FUNCTION "pgstore-v4".stop(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v4".jobs;
  r "pgstore-v4".runs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM "pgstore-v4".runs WHERE job = p_job;
  IF NOT FOUND OR r.live_until <= v_now THEN
    RETURN 'false';
  END IF;
  UPDATE "pgstore-v4".runs SET stop_by = p_by, stop_reason = p_reason, stop_at = v_now WHERE job = p_job;
  INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'stop-requested', p_by, r.token, format('by %s: %s', p_by, p_reason));
  DELETE FROM "pgstore-v4".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  UPDATE "pgstore-v4".jobs SET events = j.events + 1 WHERE job = p_job;
  RETURN 'true';
END $$;
-- jobs: the known jobs whose IDs start with a prefix, read-only
-- (docs/semantics.md, Jobs): those granted, quarantined or expected at
-- least once.
-- Parameters: schema version, prefix, at most this many (0: all).
-- Returns [job, ...] ordered byte by byte.
CREATE OR REPLACE FUNCTION "pgstore-v4".jobs(p_version integer, p_prefix text, p_limit integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT "pgstore-v4"._check_version(p_version))
    SELECT coalesce(json_agg(k.job ORDER BY k.job), '[]')
    FROM (SELECT j.job FROM c, "pgstore-v4".jobs j
      WHERE starts_with(j.job, p_prefix) AND (j.last_token > 0 OR j.q_since IS NOT NULL OR j.x_every_us IS NOT NULL)
      ORDER BY j.job LIMIT nullif(p_limit, 0)) k);
END $$;
-- status: one job, read-only (docs/semantics.md, Status), in one statement
-- and so one snapshot, with the clock read once.
-- Parameters: schema version, job.
-- Returns {"now", "job": the record or null, "run": the run or null,
--   "history": [event, ...] oldest first}.
CREATE OR REPLACE FUNCTION "pgstore-v4".status(p_version integer, p_job text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v4"._check_version(p_version))
    SELECT json_build_object(
      'now', "pgstore-v4"._us(c.now),
      'job', (SELECT json_build_object('region', j.region, 'last_token', j.last_token, 'attempts', j.attempts, 'crashes', j.crashes,
          'max_crashes', j.max_crashes, 'last_success', "pgstore-v4"._us(j.last_success),
          'x_every_us', j.x_every_us, 'x_grace_us', j.x_grace_us, 'x_since', "pgstore-v4"._us(j.x_since),
          'q', CASE WHEN j.q_since IS NOT NULL THEN "pgstore-v4"._quarantine_json(j) END,
          'o', CASE WHEN j.o_result IS NOT NULL THEN json_build_object('result', j.o_result,
            'exit_code', j.o_exit_code, 'signal', j.o_signal, 'duration_ns', j.o_duration_ns, 'reason', j.o_reason,
            'worker', j.o_worker, 'token', j.o_token, 'finished', "pgstore-v4"._us(j.o_finished)) END)
        FROM "pgstore-v4".jobs j WHERE j.job = p_job),
      'run', (SELECT json_build_object('holder', r.holder, 'host', r.host, 'pid', r.pid, 'token', r.token,
          'attempt', r.attempt, 'command', r.command, 'started', "pgstore-v4"._us(r.started),
          'expires', "pgstore-v4"._us(r.live_until), 'rtt_us', r.rtt_us, 'stop_by', r.stop_by, 'stop_reason', r.stop_reason,
          'stop_at', "pgstore-v4"._us(r.stop_at), 'live', r.live_until > c.now, 'evidence', r.evidence_until > c.now)
        FROM "pgstore-v4".runs r WHERE r.job = p_job),
      'history', (SELECT coalesce(json_agg(json_build_object('at', "pgstore-v4"._us(h.at), 'kind', h.kind,
          'worker', h.worker, 'token', h.token, 'result', h.result, 'detail', h.detail) ORDER BY h.seq), '[]')
        FROM "pgstore-v4".history h WHERE h.job = p_job))
    FROM c);
END $$;
-- leases: the live leases, read-only (docs/semantics.md, Leases), in one
-- statement, through the liveness index.
-- Parameters: schema version.
-- Returns {"now", "leases": [lease, ...] ordered by job, byte by byte}.
CREATE OR REPLACE FUNCTION "pgstore-v4".leases(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v4"._check_version(p_version))
    SELECT json_build_object('now', "pgstore-v4"._us(c.now), 'leases', (
      SELECT coalesce(json_agg(json_build_object('job', r.job, 'holder', r.holder, 'host', r.host, 'pid', r.pid,
          'token', r.token, 'attempt', r.attempt, 'command', r.command, 'started', "pgstore-v4"._us(r.started),
          'expires', "pgstore-v4"._us(r.live_until), 'rtt_us', r.rtt_us, 'stop_by', r.stop_by, 'stop_reason', r.stop_reason,
          'stop_at', "pgstore-v4"._us(r.stop_at)) ORDER BY r.job), '[]')
      FROM "pgstore-v4".runs r WHERE r.live_until > c.now))
    FROM c);
END $$;
-- quarantined: the quarantined jobs, read-only (docs/semantics.md,
-- Quarantined), through the partial index of quarantined jobs.
-- Parameters: schema version.
-- Returns [quarantine, ...] ordered by job, byte by byte.
CREATE OR REPLACE FUNCTION "pgstore-v4".quarantined(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT "pgstore-v4"._check_version(p_version))
    SELECT coalesce(json_agg("pgstore-v4"._quarantine_json(j) ORDER BY j.job), '[]')
    FROM c, "pgstore-v4".jobs j WHERE j.q_since IS NOT NULL);
END $$;
-- counts: store-wide gauges, read-only (docs/semantics.md, Counts).
-- Parameters: schema version.
-- Returns {"inflight": live runs, "quarantined": quarantined jobs}.
CREATE OR REPLACE FUNCTION "pgstore-v4".counts(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v4"._check_version(p_version))
    SELECT json_build_object(
      'inflight', (SELECT count(*) FROM "pgstore-v4".runs r WHERE r.live_until > c.now),
      'quarantined', (SELECT count(*) FROM "pgstore-v4".jobs j WHERE j.q_since IS NOT NULL))
    FROM c);
END $$;
-- checktoken: is the job's current token live? Read-only
-- (docs/semantics.md, CheckToken).
-- Parameters: schema version, job.
-- Returns {"current": the job's last token (0: none), "live": whether the
--   run of that token is live}.
CREATE OR REPLACE FUNCTION "pgstore-v4".checktoken(p_version integer, p_job text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v4"._check_version(p_version))
    SELECT json_build_object('current', coalesce(j.last_token, 0),
      'live', coalesce(r.live_until > c.now AND r.token = j.last_token, false))
    FROM c LEFT JOIN "pgstore-v4".jobs j ON j.job = p_job LEFT JOIN "pgstore-v4".runs r ON r.job = p_job);
END $$;
-- _expect records the expectation every and grace (µs) on the job's row,
-- which the caller holds, at p_now: the last writer's, its since kept while
-- every and grace are unchanged. Called by acquire (a run's expectation)
-- and expect.
CREATE OR REPLACE FUNCTION "pgstore-v4"._expect(p_job text, p_every_us bigint, p_grace_us bigint, p_now timestamptz)
RETURNS void LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
  UPDATE "pgstore-v4".jobs SET x_every_us = p_every_us, x_grace_us = p_grace_us, x_since = p_now
  WHERE job = p_job AND (x_every_us IS DISTINCT FROM p_every_us OR x_grace_us IS DISTINCT FROM p_grace_us)
$$;

-- expect: set or clear the job's expectation by an operator's decision
-- (docs/semantics.md, Expect), in one transaction.
-- Parameters: schema version, job, every (µs; NULL clears), grace (µs), by,
--   history detail.
-- Returns JSON true when recorded, false when clearing a job without an
-- expectation (nothing changed).
CREATE OR REPLACE FUNCTION "pgstore-v4".expect(p_version integer, p_job text, p_every_us bigint, p_grace_us bigint,
  p_by text, p_detail text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j "pgstore-v4".jobs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM 4 THEN
    PERFORM "pgstore-v4"._check_version(p_version);
  END IF;
  SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    IF p_every_us IS NULL THEN
      RETURN 'false';
    END IF;
    INSERT INTO "pgstore-v4".jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM "pgstore-v4".jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();
  IF p_every_us IS NULL THEN
    IF j.x_every_us IS NULL THEN
      RETURN 'false';
    END IF;
    UPDATE "pgstore-v4".jobs SET x_every_us = NULL, x_grace_us = NULL, x_since = NULL WHERE job = p_job;
  ELSE
    PERFORM "pgstore-v4"._expect(p_job, p_every_us, p_grace_us, v_now);
  END IF;
  INSERT INTO "pgstore-v4".history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'expectation-set', p_by, 0, p_detail);
  DELETE FROM "pgstore-v4".history WHERE job = p_job AND seq <= j.events + 1 - 20;
  UPDATE "pgstore-v4".jobs SET events = j.events + 1 WHERE job = p_job;
  RETURN 'true';
END $$;
-- overdue: the jobs past their expectation, read-only (docs/semantics.md,
-- Overdue), in one statement with the clock read once. It reads the
-- jobs_due_at index up to now: its cost follows the overdue jobs.
-- Parameters: schema version.
-- Returns {"now", "jobs": [{"job", "every_us", "grace_us", "since",
--   "last_success" (null: never)}, ...] ordered by job}; times in
--   microseconds since the Unix epoch.
CREATE OR REPLACE FUNCTION "pgstore-v4".overdue(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, "pgstore-v4"._check_version(p_version))
    SELECT json_build_object('now', "pgstore-v4"._us(c.now),
      'jobs', (SELECT coalesce(json_agg(json_build_object('job', j.job, 'every_us', j.x_every_us,
          'grace_us', j.x_grace_us, 'since', "pgstore-v4"._us(j.x_since), 'last_success', "pgstore-v4"._us(j.last_success))
          ORDER BY j.job), '[]')
        FROM "pgstore-v4".jobs j WHERE j.due_at IS NOT NULL AND j.due_at < c.now))
    FROM c);
END $$;
UPDATE "pgstore-v4".meta SET version = 4, migrated_at = clock_timestamp();
COMMIT;

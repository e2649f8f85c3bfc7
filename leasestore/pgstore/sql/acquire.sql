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
CREATE OR REPLACE FUNCTION @schema@.acquire(p_version integer, p_job text, p_holder text, p_host text,
  p_pid integer, p_command text[], p_ttl_us bigint, p_evidence_ttl_us bigint, p_max_crashes integer,
  p_min_interval_us bigint, p_region text, p_deadline_us bigint, p_expect_every_us bigint,
  p_expect_grace_us bigint) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  r @schema@.runs;
  v_has_run boolean;
  v_now timestamptz;
  v_crash json;
  v_token bigint;
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    INSERT INTO @schema@.jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM @schema@.runs WHERE job = p_job;
  v_has_run := FOUND;

  -- The holder gave up on its grant (recordlate with token 0): its request,
  -- arriving now, would grant a lease nobody runs.
  IF j.gave_up = p_holder THEN
    RETURN json_build_object('k', 'gaveup', 'now', @schema@._us(v_now));
  END IF;

  -- Asked again by the holder of the live lease (its first answer was
  -- lost): the same lease, renewed as renew does. Nothing else changes.
  IF v_has_run AND r.holder = p_holder AND r.live_until > v_now THEN
    UPDATE @schema@.runs SET live_until = v_now + @schema@._micros(p_ttl_us),
      evidence_until = v_now + r.evidence_ttl
    WHERE job = p_job;
    RETURN json_build_object('k', 'ok', 'now', @schema@._us(v_now), 'token', r.token, 'attempt', r.attempt);
  END IF;

  IF j.q_since IS NOT NULL THEN
    RETURN json_build_object('k', 'quarantined', 'now', @schema@._us(v_now), 'q', @schema@._quarantine_json(j));
  END IF;

  -- Another region's request: refused whether the job is held or free.
  IF p_region <> '' AND j.region IS NOT NULL AND j.region <> p_region THEN
    RETURN json_build_object('k', 'region', 'now', @schema@._us(v_now), 'region', j.region);
  END IF;

  IF v_has_run AND r.live_until > v_now THEN
    RETURN json_build_object('k', 'held', 'now', @schema@._us(v_now), 'holder', r.holder, 'host', r.host,
      'pid', r.pid, 'token', r.token, 'since', @schema@._us(r.started), 'expires', @schema@._us(r.live_until));
  END IF;

  -- The run's liveness expired: its crash is counted (or, its evidence
  -- expired too, it is dropped uncounted).
  IF v_has_run THEN
    v_crash := @schema@._count_crashes(ARRAY[p_job], v_now, true, NULL, 'acquire') -> 0;
    SELECT * INTO j FROM @schema@.jobs WHERE job = p_job;
    IF j.q_since IS NOT NULL THEN
      RETURN json_build_object('k', 'quarantined', 'now', @schema@._us(v_now), 'q', @schema@._quarantine_json(j));
    END IF;
  END IF;

  -- Past the deadline: refused, the crash counted above stays counted.
  IF p_deadline_us <> 0 AND @schema@._us(v_now) > p_deadline_us THEN
    RETURN json_build_object('k', 'deadline', 'now', @schema@._us(v_now));
  END IF;

  IF p_min_interval_us > 0 AND j.last_success IS NOT NULL
     AND v_now < j.last_success + @schema@._micros(p_min_interval_us) THEN
    RETURN json_build_object('k', 'toosoon', 'now', @schema@._us(v_now), 'last_success', @schema@._us(j.last_success));
  END IF;

  -- Never below the clock: tokens rise even after the job's rows were
  -- deleted or the tables truncated.
  v_token := greatest(j.last_token + 1, @schema@._us(v_now));
  INSERT INTO @schema@.runs (job, holder, token, host, pid, command, started, attempt, evidence_ttl,
    max_crashes, live_until, evidence_until)
  VALUES (p_job, p_holder, v_token, p_host, p_pid, p_command, v_now, j.attempts + 1,
    @schema@._micros(p_evidence_ttl_us), p_max_crashes, v_now + @schema@._micros(p_ttl_us),
    v_now + @schema@._micros(p_evidence_ttl_us));
  -- The detail leaves out host and pid (docs/semantics.md, History events):
  -- the run's row has them while it lasts, and the default worker ID
  -- (host:pid:random) keeps them in every event.
  INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'acquired', p_holder, v_token, 'attempt ' || (j.attempts + 1));
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + 1 - @history@;
  UPDATE @schema@.jobs SET last_token = v_token, attempts = j.attempts + 1, max_crashes = p_max_crashes,
    last_holder = p_holder, last_host = p_host, events = j.events + 1,
    region = coalesce(j.region, nullif(p_region, ''))
  WHERE job = p_job;
  IF p_expect_every_us IS NOT NULL THEN
    PERFORM @schema@._expect(p_job, p_expect_every_us, p_expect_grace_us, v_now);
  END IF;
  -- Token feeds hear of the grant; waiters do not (nothing was freed).
  PERFORM @schema@._publish_token('g', v_token, p_job);
  RETURN json_build_object('k', 'ok', 'now', @schema@._us(v_now), 'token', v_token, 'attempt', j.attempts + 1,
    'recovered', v_crash);
END $$;

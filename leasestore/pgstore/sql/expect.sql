-- _expect records the expectation every and grace (µs) on the job's row,
-- which the caller holds, at p_now: the last writer's, its since kept while
-- every and grace are unchanged. Called by acquire (a run's expectation)
-- and expect.
CREATE OR REPLACE FUNCTION @schema@._expect(p_job text, p_every_us bigint, p_grace_us bigint, p_now timestamptz)
RETURNS void LANGUAGE sql SET search_path = pg_catalog, pg_temp AS $$
  UPDATE @schema@.jobs SET x_every_us = p_every_us, x_grace_us = p_grace_us, x_since = p_now
  WHERE job = p_job AND (x_every_us IS DISTINCT FROM p_every_us OR x_grace_us IS DISTINCT FROM p_grace_us)
$$;

-- expect: set or clear the job's expectation by an operator's decision
-- (docs/semantics.md, Expect), in one transaction.
-- Parameters: schema version, job, every (µs; NULL clears), grace (µs), by,
--   history detail.
-- Returns JSON true when recorded, false when clearing a job without an
-- expectation (nothing changed).
CREATE OR REPLACE FUNCTION @schema@.expect(p_version integer, p_job text, p_every_us bigint, p_grace_us bigint,
  p_by text, p_detail text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    IF p_every_us IS NULL THEN
      RETURN 'false';
    END IF;
    INSERT INTO @schema@.jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();
  IF p_every_us IS NULL THEN
    IF j.x_every_us IS NULL THEN
      RETURN 'false';
    END IF;
    UPDATE @schema@.jobs SET x_every_us = NULL, x_grace_us = NULL, x_since = NULL WHERE job = p_job;
  ELSE
    PERFORM @schema@._expect(p_job, p_every_us, p_grace_us, v_now);
  END IF;
  INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'expectation-set', p_by, 0, p_detail);
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + 1 - @history@;
  UPDATE @schema@.jobs SET events = j.events + 1 WHERE job = p_job;
  RETURN 'true';
END $$;

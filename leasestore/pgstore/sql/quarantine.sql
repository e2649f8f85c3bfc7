-- quarantine: an operator's kill switch (docs/semantics.md, Quarantine),
-- for any job, in one transaction.
-- Parameters: schema version, job, by, reason.
-- Returns JSON true.
CREATE OR REPLACE FUNCTION @schema@.quarantine(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
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
    INSERT INTO @schema@.jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();
  INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'quarantined', p_by, 0, format('by %s: %s', p_by, p_reason));
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + 1 - @history@;
  UPDATE @schema@.jobs SET events = j.events + 1, q_since = coalesce(j.q_since, v_now), q_by = p_by,
    q_reason = p_reason, q_crashes = j.crashes,
    q_last_holder = CASE WHEN j.q_since IS NULL THEN j.last_holder ELSE j.q_last_holder END,
    q_last_host = CASE WHEN j.q_since IS NULL THEN j.last_host ELSE j.q_last_host END
  WHERE job = p_job;
  RETURN 'true';
END $$;

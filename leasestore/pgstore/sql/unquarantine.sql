-- unquarantine: let a quarantined job run again (docs/semantics.md,
-- ReleaseQuarantine), in one transaction.
-- Parameters: schema version, job, by, reason.
-- Returns JSON true when released, false when the job was not quarantined.
CREATE OR REPLACE FUNCTION @schema@.unquarantine(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND OR j.q_since IS NULL THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'released-from-quarantine', p_by, 0, format('by %s: %s', p_by, p_reason));
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + 1 - @history@;
  UPDATE @schema@.jobs SET events = j.events + 1, crashes = 0, q_since = NULL, q_by = NULL, q_reason = NULL,
    q_crashes = NULL, q_last_holder = NULL, q_last_host = NULL
  WHERE job = p_job;
  PERFORM pg_notify(@schema@._channel(p_job), '');
  PERFORM @schema@._wake_waiters(p_job, v_now);
  RETURN 'true';
END $$;

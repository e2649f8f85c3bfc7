-- stop: an operator's request that the job's running children stop, every
-- live run's (docs/semantics.md, Stop), in one transaction. Each holder's
-- next renew returns it.
-- Parameters: schema version, job, by, reason.
-- Returns JSON true when the request is recorded, false when no run is
-- live.
CREATE OR REPLACE FUNCTION @schema@.stop(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  v_now timestamptz;
  v_stopped integer;
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  -- A stop-requested event per live run, by slot.
  WITH stopped AS (
    UPDATE @schema@.runs SET stop_by = p_by, stop_reason = p_reason, stop_at = v_now
    WHERE job = p_job AND live_until > v_now
    RETURNING slot, token
  ), recorded AS (
    INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
    SELECT p_job, j.events + row_number() OVER (ORDER BY s.slot), v_now, 'stop-requested', p_by, s.token,
      format('by %s: %s', p_by, p_reason)
    FROM stopped s
  )
  SELECT count(*) INTO v_stopped FROM stopped;
  IF v_stopped = 0 THEN
    RETURN 'false';
  END IF;
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + v_stopped - @history@;
  UPDATE @schema@.jobs SET events = j.events + v_stopped WHERE job = p_job;
  RETURN 'true';
END $$;

-- stop: an operator's request that the job's running child stop
-- (docs/semantics.md, Stop), in one transaction. The holder's next renew
-- returns it.
-- Parameters: schema version, job, by, reason.
-- Returns JSON true when the request is recorded, false when no run is
-- live.
CREATE OR REPLACE FUNCTION @schema@.stop(p_version integer, p_job text, p_by text, p_reason text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  r @schema@.runs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM @schema@.runs WHERE job = p_job;
  IF NOT FOUND OR r.live_until <= v_now THEN
    RETURN 'false';
  END IF;
  UPDATE @schema@.runs SET stop_by = p_by, stop_reason = p_reason, stop_at = v_now WHERE job = p_job;
  INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'stop-requested', p_by, r.token, format('by %s: %s', p_by, p_reason));
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + 1 - @history@;
  UPDATE @schema@.jobs SET events = j.events + 1 WHERE job = p_job;
  RETURN 'true';
END $$;

-- release: end a run with its outcome, that of the run of the token, whatever
-- its slot (docs/semantics.md, Release), in one
-- transaction, the clock read once after the job's lock is taken.
-- Parameters: schema version, job, token, result, exit code, signal,
--   duration (ns), reason, the released or crashed event's detail.
-- Returns JSON true when released, false when the lease is lost (the run's
-- evidence is gone or carries another token); then nothing changed.
CREATE OR REPLACE FUNCTION @schema@.release(p_version integer, p_job text, p_token bigint, p_result text,
  p_exit_code integer, p_signal integer, p_duration_ns bigint, p_reason text, p_detail text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  r @schema@.runs;
  v_now timestamptz;
  v_completed boolean := p_result = 'completed';
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'false';
  END IF;
  v_now := clock_timestamp();
  SELECT * INTO r FROM @schema@.runs WHERE job = p_job AND token = p_token;
  IF NOT FOUND OR r.evidence_until <= v_now THEN
    RETURN 'false';
  END IF;
  UPDATE @schema@.jobs SET o_result = p_result, o_exit_code = p_exit_code, o_signal = p_signal,
    o_duration_ns = p_duration_ns, o_reason = p_reason, o_worker = r.holder, o_token = r.token, o_finished = v_now,
    crashes = CASE WHEN v_completed THEN 0 ELSE crashes END,
    last_success = CASE WHEN v_completed THEN v_now ELSE last_success END,
    events = CASE WHEN p_result = 'crashed' THEN events ELSE events + 1 END
  WHERE job = p_job;
  IF p_result = 'crashed' THEN
    PERFORM @schema@._count_crashes(ARRAY[p_job], v_now, r.token, p_detail, NULL);
    RETURN 'true';
  END IF;
  INSERT INTO @schema@.history (job, seq, at, kind, worker, token, result, detail)
  VALUES (p_job, j.events + 1, v_now, 'released', r.holder, r.token, p_result, p_detail);
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + 1 - @history@;
  DELETE FROM @schema@.runs WHERE job = p_job AND slot = r.slot;
  PERFORM pg_notify(@schema@._channel(p_job), '');
  PERFORM @schema@._publish_token('e', r.token, p_job);
  PERFORM @schema@._wake_waiters(p_job, v_now);
  RETURN 'true';
END $$;

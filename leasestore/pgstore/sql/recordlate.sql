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
CREATE OR REPLACE FUNCTION @schema@.recordlate(p_version integer, p_job text, p_holder text, p_token bigint,
  p_result text, p_exit_code integer, p_signal integer, p_duration_ns bigint, p_reason text, p_detail text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  r @schema@.runs;
  h @schema@.history;
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
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    IF p_token <> 0 THEN
      RETURN json_build_object('released', false, 'withdrawn', false, 'lifted', false, 'crashes', 0);
    END IF;
    -- Gave up before its grant arrived: the job's row keeps the holder.
    INSERT INTO @schema@.jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();

  -- A holder that gave up on its grant: its acquire, arriving later, is
  -- refused (acquire.sql), and it waits no more, leaving the queue as
  -- leave does. Only the last one is kept.
  IF p_token = 0 THEN
    IF j.gave_up IS DISTINCT FROM p_holder THEN
      UPDATE @schema@.jobs SET gave_up = p_holder WHERE job = p_job;
    END IF;
    DELETE FROM @schema@.queue WHERE job = p_job AND worker = p_holder;
    IF FOUND THEN
      PERFORM @schema@._left_queue(p_job, v_now);
    END IF;
  END IF;

  -- 1. The run's evidence is there: exactly a release (its waiters and the
  -- token feeds hear of it there).
  SELECT * INTO r FROM @schema@.runs
  WHERE job = p_job AND holder = p_holder AND (p_token = 0 OR token = p_token) AND evidence_until > v_now
  ORDER BY slot LIMIT 1;
  IF FOUND THEN
    PERFORM @schema@.release(@version@, p_job, r.token, p_result, p_exit_code, p_signal, p_duration_ns, p_reason,
      p_detail);
    RETURN json_build_object('released', true, 'withdrawn', false, 'lifted', false,
      'crashes', (SELECT crashes FROM @schema@.jobs WHERE job = p_job));
  END IF;

  -- 2. The run's events, oldest first: its crash, its start, its release.
  FOR h IN SELECT * FROM @schema@.history WHERE job = p_job ORDER BY seq LOOP
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
  v_recorded := v_recorded OR EXISTS (SELECT FROM @schema@.history x
    WHERE x.job = p_job AND x.kind = 'late-outcome' AND x.worker = p_holder AND x.token = v_token);
  IF v_recorded OR v_token = 0 OR v_token > j.last_token THEN
    -- 3. Nothing to correct, nothing to add.
    RETURN json_build_object('released', false, 'withdrawn', false, 'lifted', false, 'crashes', j.crashes);
  END IF;

  -- The crash counted for the run still counts unless a completed run, or
  -- an operator's release from quarantine, came after it.
  v_crashes := j.crashes;
  IF v_crashed IS NOT NULL AND NOT EXISTS (SELECT FROM @schema@.history x
      WHERE x.job = p_job AND x.seq > v_crashed AND (
        (x.kind = 'released' AND x.result = 'completed')
        OR (x.kind = 'late-outcome' AND x.result = 'completed' AND x.token > v_token)
        OR (x.kind = 'released-from-quarantine' AND x.worker <> 'leasectl'))) THEN
    v_withdrawn := true;
    IF p_result = 'completed' THEN
      -- A completion at this run's place would have left only the crashes
      -- counted after it, less those withdrawn since.
      SELECT count(*) INTO v_crashes FROM @schema@.history c
      WHERE c.job = p_job AND c.seq > v_crashed AND c.kind = 'crashed' AND NOT EXISTS (SELECT FROM @schema@.history x
        WHERE x.job = p_job AND x.kind = 'late-outcome' AND x.worker = c.worker AND x.token = c.token);
      IF v_started IS NOT NULL THEN
        UPDATE @schema@.jobs SET last_success = greatest(last_success, v_started + @schema@._micros(p_duration_ns / 1000))
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
    INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
    VALUES (p_job, v_seq, v_now, 'released-from-quarantine', 'leasectl', 0,
      format('by leasectl: the crash of token %s that led to it was withdrawn: its outcome arrived late', v_token));
    UPDATE @schema@.jobs SET q_since = NULL, q_by = NULL, q_reason = NULL, q_crashes = NULL, q_last_holder = NULL,
      q_last_host = NULL
    WHERE job = p_job;
    v_detail := v_detail || '; the quarantine it led to is lifted';
    PERFORM pg_notify(@schema@._channel(p_job), '');
    PERFORM @schema@._wake_waiters(p_job, v_now);
  END IF;
  v_seq := v_seq + 1;
  INSERT INTO @schema@.history (job, seq, at, kind, worker, token, result, detail)
  VALUES (p_job, v_seq, v_now, 'late-outcome', p_holder, v_token, p_result, v_detail);
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= v_seq - @history@;
  -- Finished now: after the crash counted for the run, which Status readers
  -- compare it with; unless a later run's outcome is recorded.
  IF j.o_token IS NULL OR j.o_token < v_token THEN
    UPDATE @schema@.jobs SET o_result = p_result, o_exit_code = p_exit_code, o_signal = p_signal,
      o_duration_ns = p_duration_ns, o_reason = p_reason, o_worker = p_holder, o_token = v_token, o_finished = v_now
    WHERE job = p_job;
  END IF;
  UPDATE @schema@.jobs SET crashes = v_crashes, events = v_seq WHERE job = p_job;
  RETURN json_build_object('released', false, 'withdrawn', v_withdrawn, 'lifted', v_lifted, 'crashes', v_crashes);
END $$;

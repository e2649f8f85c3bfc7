-- renew: extend a live lease, that of one run of the job, whatever its
-- slot (docs/semantics.md, Renew), in one
-- transaction, the clock read once after the job's lock is taken.
-- Parameters: schema version, job, holder, token, ttl (µs), the holder's
--   last renewal round trip (µs; 0: not measured, the one kept stays).
-- Returns JSON true when renewed, {"stop_by", "stop_reason", "stop_at"}
-- when renewed and an operator asked the run to stop (the stop function),
-- false when the lease is lost (after recording a lease-lost event if the
-- run's own evidence is still there).
CREATE OR REPLACE FUNCTION @schema@.renew(p_version integer, p_job text, p_holder text, p_token bigint,
  p_ttl_us bigint, p_rtt_us bigint) RETURNS json
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
  SELECT * INTO r FROM @schema@.runs WHERE job = p_job AND token = p_token AND holder = p_holder;
  IF NOT FOUND OR r.evidence_until <= v_now THEN
    RETURN 'false';
  END IF;
  IF r.live_until <= v_now THEN
    INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
    VALUES (p_job, j.events + 1, v_now, 'lease-lost', p_holder, p_token, 'renewal came after the lease expired');
    DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + 1 - @history@;
    UPDATE @schema@.jobs SET events = j.events + 1 WHERE job = p_job;
    RETURN 'false';
  END IF;
  UPDATE @schema@.runs SET live_until = v_now + @schema@._micros(p_ttl_us), evidence_until = v_now + r.evidence_ttl,
    rtt_us = CASE WHEN p_rtt_us > 0 THEN p_rtt_us ELSE r.rtt_us END
  WHERE job = p_job AND slot = r.slot;
  IF r.stop_by IS NOT NULL THEN
    RETURN json_build_object('stop_by', r.stop_by, 'stop_reason', r.stop_reason, 'stop_at', @schema@._us(r.stop_at));
  END IF;
  RETURN 'true';
END $$;

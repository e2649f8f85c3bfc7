-- scan: one batch of the reaper's pass (docs/semantics.md, Scan), in one
-- transaction. It locks the jobs of up to p_batch runs whose liveness
-- expired, oldest first, with FOR UPDATE SKIP LOCKED: a job locked by
-- another transaction (a reaper, an acquire) is left to it, so reapers on
-- several hosts never wait for one another and count each crash once.
-- Each run with its evidence is counted as a crash, a job's by slot; one
-- whose evidence expired too is dropped uncounted. A job of several slots
-- may appear once per expired run.
-- Parameters: schema version, batch size.
-- Returns {"now", "examined": runs locked, "crashes": [crash, ...]}.
CREATE OR REPLACE FUNCTION @schema@.scan(p_version integer, p_batch integer) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  v_now timestamptz := clock_timestamp();
  v_jobs text[];
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT array_agg(x.job) INTO v_jobs FROM (
    SELECT j.job FROM @schema@.runs e JOIN @schema@.jobs j ON j.job = e.job
    WHERE e.live_until <= v_now
    ORDER BY e.live_until
    LIMIT p_batch
    FOR NO KEY UPDATE OF j SKIP LOCKED) x;
  -- Runs that ended or were renewed since the index was read are left
  -- alone: _count_crashes reads them again, under the jobs' locks.
  RETURN json_build_object('now', @schema@._us(v_now), 'examined', coalesce(cardinality(v_jobs), 0),
    'crashes', @schema@._count_crashes(coalesce(v_jobs, '{}'), v_now, NULL, NULL, 'scan'));
END $$;

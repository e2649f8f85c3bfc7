-- counts: store-wide gauges, read-only (docs/semantics.md, Counts).
-- Parameters: schema version.
-- Returns {"inflight": jobs with a live run, "quarantined": quarantined
--   jobs}.
CREATE OR REPLACE FUNCTION @schema@.counts(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, @schema@._check_version(p_version))
    SELECT json_build_object(
      'inflight', (SELECT count(DISTINCT r.job) FROM @schema@.runs r WHERE r.live_until > c.now),
      'quarantined', (SELECT count(*) FROM @schema@.jobs j WHERE j.q_since IS NOT NULL))
    FROM c);
END $$;

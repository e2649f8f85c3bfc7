-- quarantined: the quarantined jobs, read-only (docs/semantics.md,
-- Quarantined), through the partial index of quarantined jobs.
-- Parameters: schema version.
-- Returns [quarantine, ...] ordered by job, byte by byte.
CREATE OR REPLACE FUNCTION @schema@.quarantined(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT @schema@._check_version(p_version))
    SELECT coalesce(json_agg(@schema@._quarantine_json(j) ORDER BY j.job), '[]')
    FROM c, @schema@.jobs j WHERE j.q_since IS NOT NULL);
END $$;

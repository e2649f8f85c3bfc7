-- jobs: the known jobs whose IDs start with a prefix, read-only
-- (docs/semantics.md, Jobs): those granted, quarantined or expected at
-- least once.
-- Parameters: schema version, prefix, at most this many (0: all).
-- Returns [job, ...] ordered byte by byte.
CREATE OR REPLACE FUNCTION @schema@.jobs(p_version integer, p_prefix text, p_limit integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT @schema@._check_version(p_version))
    SELECT coalesce(json_agg(k.job ORDER BY k.job), '[]')
    FROM (SELECT j.job FROM c, @schema@.jobs j
      WHERE starts_with(j.job, p_prefix) AND (j.last_token > 0 OR j.q_since IS NOT NULL OR j.x_every_us IS NOT NULL)
      ORDER BY j.job LIMIT nullif(p_limit, 0)) k);
END $$;

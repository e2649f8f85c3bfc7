-- checktoken: is the job's current token live? Read-only
-- (docs/semantics.md, CheckToken).
-- Parameters: schema version, job.
-- Returns {"current": the job's last token (0: none), "live": whether the
--   run of that token is live}.
CREATE OR REPLACE FUNCTION @schema@.checktoken(p_version integer, p_job text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, @schema@._check_version(p_version))
    SELECT json_build_object('current', coalesce(j.last_token, 0),
      'live', coalesce(r.live_until > c.now AND r.token = j.last_token, false))
    FROM c LEFT JOIN @schema@.jobs j ON j.job = p_job LEFT JOIN @schema@.runs r ON r.job = p_job);
END $$;

-- checktoken: is a token a current fencing token of the job? Read-only
-- (docs/semantics.md, CheckToken): of a job of one slot, the last token
-- granted, while its run is live; of a job of several, every live run's.
-- Parameters: schema version, job, token (0: none, for the state alone).
-- Returns {"current": the job's last token (0: none), "live": whether the
--   run of that token is live, "ok": whether the token is current}.
CREATE OR REPLACE FUNCTION @schema@.checktoken(p_version integer, p_job text, p_token bigint) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, @schema@._check_version(p_version))
    SELECT json_build_object('current', coalesce(j.last_token, 0),
      'live', EXISTS (SELECT FROM @schema@.runs r WHERE r.job = p_job AND r.token = j.last_token AND r.live_until > c.now),
      'ok', EXISTS (SELECT FROM @schema@.runs r WHERE r.job = p_job AND r.token = p_token AND r.live_until > c.now)
        AND (p_token = j.last_token OR j.slots > 1))
    FROM c LEFT JOIN @schema@.jobs j ON j.job = p_job);
END $$;

-- leases: the live leases, one per slot in use, read-only
-- (docs/semantics.md, Leases), in one statement, through the liveness
-- index.
-- Parameters: schema version.
-- Returns {"now", "leases": [lease, ...] ordered by job, byte by byte, and
--   slot}.
CREATE OR REPLACE FUNCTION @schema@.leases(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, @schema@._check_version(p_version))
    SELECT json_build_object('now', @schema@._us(c.now), 'leases', (
      SELECT coalesce(json_agg(json_build_object('job', r.job, 'slot', r.slot, 'holder', r.holder, 'host', r.host, 'pid', r.pid,
          'token', r.token, 'attempt', r.attempt, 'command', r.command, 'started', @schema@._us(r.started),
          'expires', @schema@._us(r.live_until), 'rtt_us', r.rtt_us, 'stop_by', r.stop_by, 'stop_reason', r.stop_reason,
          'stop_at', @schema@._us(r.stop_at)) ORDER BY r.job, r.slot), '[]')
      FROM @schema@.runs r WHERE r.live_until > c.now))
    FROM c);
END $$;

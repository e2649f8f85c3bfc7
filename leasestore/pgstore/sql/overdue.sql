-- overdue: the jobs past their expectation, read-only (docs/semantics.md,
-- Overdue), in one statement with the clock read once. It reads the
-- jobs_due_at index up to now: its cost follows the overdue jobs.
-- Parameters: schema version.
-- Returns {"now", "jobs": [{"job", "every_us", "grace_us", "since",
--   "last_success" (null: never)}, ...] ordered by job}; times in
--   microseconds since the Unix epoch.
CREATE OR REPLACE FUNCTION @schema@.overdue(p_version integer) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, @schema@._check_version(p_version))
    SELECT json_build_object('now', @schema@._us(c.now),
      'jobs', (SELECT coalesce(json_agg(json_build_object('job', j.job, 'every_us', j.x_every_us,
          'grace_us', j.x_grace_us, 'since', @schema@._us(j.x_since), 'last_success', @schema@._us(j.last_success))
          ORDER BY j.job), '[]')
        FROM @schema@.jobs j WHERE j.due_at IS NOT NULL AND j.due_at < c.now))
    FROM c);
END $$;

-- Migration from schema version 3 to 4: a job's expectation, how often it
-- must complete successfully (docs/semantics.md, Expect and Overdue).
-- Placeholders: @schema@ (the namespace's schema, quoted).

-- x_every_us, x_grace_us, x_since: the expectation's period and grace (µs)
-- and since when it holds; NULL: none.
ALTER TABLE @schema@.jobs ADD COLUMN x_every_us bigint, ADD COLUMN x_grace_us bigint, ADD COLUMN x_since timestamptz;

-- _due is when a job becomes overdue: its last success, or since when its
-- expectation holds if it never succeeded, plus every and grace; NULL
-- without an expectation. IMMUTABLE, as a generated column needs, and
-- truly so: adding whole microseconds to a timestamptz does not depend on
-- the time zone (only months and days would). Made here, not with the
-- other functions: the column below depends on it.
CREATE OR REPLACE FUNCTION @schema@._due(p_last_success timestamptz, p_since timestamptz, p_every_us bigint, p_grace_us bigint)
RETURNS timestamptz LANGUAGE sql IMMUTABLE PARALLEL SAFE SET search_path = pg_catalog, pg_temp AS $$
  SELECT coalesce(p_last_success, p_since) + (p_every_us + p_grace_us) * interval '1 microsecond'
$$;

-- due_at: _due of the row, kept by PostgreSQL itself whatever function
-- changes the last success or the expectation, and indexed, so that
-- overdue reads the overdue jobs only. Adding it rewrites the jobs table
-- once, under the migration's lock.
ALTER TABLE @schema@.jobs ADD COLUMN due_at timestamptz
  GENERATED ALWAYS AS (@schema@._due(last_success, x_since, x_every_us, x_grace_us)) STORED;
CREATE INDEX jobs_due_at ON @schema@.jobs (due_at) WHERE due_at IS NOT NULL;

-- Version 3's acquire takes fewer arguments than version 4's (the run's
-- expectation): dropped, as version 2 dropped version 1's, so that a
-- version 3 client's call fails and its migration says the schema is newer.
DROP FUNCTION IF EXISTS @schema@.acquire(integer, text, text, text, integer, text[], bigint, bigint, integer, bigint, text, bigint);

-- Migration from schema version 1 to 2: seed 002's regions, the holders'
-- renewal round trips and the holder that gave up on its grant
-- (docs/semantics.md, Acquire, Renew and RecordLate). Placeholders:
-- @schema@ (the namespace's schema, quoted). Every column is added with a
-- constant default, which PostgreSQL records without rewriting the tables.

-- region: the job's region, recorded by its first grant that names one;
-- NULL: none recorded, and any region may take the job.
ALTER TABLE @schema@.jobs ADD COLUMN region text;

-- gave_up: the last holder that gave up on its grant (recordlate with
-- token 0), whose acquire arriving later is refused; NULL: none.
ALTER TABLE @schema@.jobs ADD COLUMN gave_up text;

-- rtt_us: the round trip of the holder's last renewal as it reported it,
-- in µs; 0: none yet. A new grant is a new row, so it starts without one.
ALTER TABLE @schema@.runs ADD COLUMN rtt_us bigint NOT NULL DEFAULT 0;

-- Version 1's acquire and renew take fewer arguments than version 2's, so
-- CREATE OR REPLACE would leave them beside the new ones, and a version 1
-- client calling them would pass their version check and grant with
-- version 1's rules (no region, no deadline). Dropped, its call fails and
-- its migration then says that the schema is newer than it. _rfc3339 was
-- for version 1's history details.
DROP FUNCTION IF EXISTS @schema@.acquire(integer, text, text, text, integer, text[], bigint, bigint, integer, bigint);
DROP FUNCTION IF EXISTS @schema@.renew(integer, text, text, bigint, bigint);
DROP FUNCTION IF EXISTS @schema@._rfc3339(timestamptz);

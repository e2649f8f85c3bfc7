-- Migration from schema version 2 to 3: an operator's request that a run
-- stop, and the outcome a history event carries (docs/semantics.md, Stop
-- and History events). Placeholders: @schema@ (the namespace's schema,
-- quoted). Every column is added without a default, which PostgreSQL
-- records without rewriting the tables.

-- stop_by, stop_reason, stop_at: who asked the run to stop, why, and when
-- (the stop function); NULL: nobody. A new grant is a new row, so it starts
-- without one.
ALTER TABLE @schema@.runs ADD COLUMN stop_by text, ADD COLUMN stop_reason text, ADD COLUMN stop_at timestamptz;

-- result: the run's outcome on a released, crashed or late-outcome event,
-- which recordlate reads to tell whether a completion ended a crash streak;
-- NULL on other events, and on the events version 2 recorded.
ALTER TABLE @schema@.history ADD COLUMN result text;

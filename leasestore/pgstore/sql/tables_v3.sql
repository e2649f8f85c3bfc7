-- Migration from schema version 2 to 3: an operator's request that a run
-- stop, and the outcome a history event carries (docs/semantics.md, Stop
-- and History events). Placeholders: @schema@ (the namespace's schema,
-- quoted). Every column is added without a default, which PostgreSQL
-- records without rewriting the tables.

-- stop_by, stop_reason, stop_at: who asked the run to stop, why, and when
-- (the stop function); NULL: nobody. A new grant is a new row, so it starts
-- without one.
ALTER TABLE @schema@.runs ADD COLUMN stop_by text, ADD COLUMN stop_reason text, ADD COLUMN stop_at timestamptz;

-- result: the run's outcome on a released or late-outcome event, and on a
-- crashed event of a run that released itself as crashed, which recordlate
-- reads (a completion ends a crash streak; a crashed outcome recorded in
-- time is no absence to undo); NULL on other events. The events version 2
-- recorded get theirs from their detail, whose first word it was.
ALTER TABLE @schema@.history ADD COLUMN result text;
UPDATE @schema@.history SET result = split_part(detail, ' ', 1)
WHERE kind IN ('released', 'crashed', 'late-outcome')
  AND split_part(detail, ' ', 1) IN ('completed', 'failed', 'crashed', 'not-started');

-- Migration to schema version 7: waiters woken in their turn
-- (docs/semantics.md, Slots and the queue). The tables stay as version 6
-- left them; the functions notify each waiter whose turn it is on a channel
-- of its own (lib.sql, _wake_waiters), where a waiter listens only on a
-- schema at this version (notify.go). The step is the version: a leasectl
-- older than it is refused rather than install again functions that notify
-- the job's channel alone (docs/postgres.md, Slots and the queue).
-- Placeholders: @schema@ (the namespace's schema, quoted).

COMMENT ON TABLE @schema@.queue IS 'leasectl: the waiters of each job, oldest first, each woken in its turn on a channel of its own; change it only through the functions of this schema';

-- Version 6's _refused read the clock again; version 7's takes the
-- acquire's. Dropped, so that no function of version 6 is left beside
-- version 7's.
DROP FUNCTION IF EXISTS @schema@._refused(text, text, json);

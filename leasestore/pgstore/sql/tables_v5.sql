-- Migration from schema version 4 to 5: counting slots and the queue of
-- waiters (docs/semantics.md, Slots and the queue). Placeholders: @schema@
-- (the namespace's schema, quoted).

-- slots: the job's number of slots, as its last grant asked for it; the
-- runs in flight were all granted with it. A constant default, which
-- PostgreSQL records without rewriting the table.
ALTER TABLE @schema@.jobs ADD COLUMN slots integer NOT NULL DEFAULT 1;

-- slot: the run's slot, from 0. A job has a run per slot in use, so the
-- runs are keyed by job and slot; the runs version 4 left are each their
-- job's only one, in slot 0.
ALTER TABLE @schema@.runs ADD COLUMN slot integer NOT NULL DEFAULT 0;
ALTER TABLE @schema@.runs DROP CONSTRAINT runs_pkey;
ALTER TABLE @schema@.runs ADD PRIMARY KEY (job, slot);

-- queue: each job's waiters, in the order they started waiting (seq, from
-- one sequence for every job); a waiter's place lapses at live_until
-- unless it asks again, and the next transition that reads the queue
-- drops it.
CREATE TABLE @schema@.queue (
  job        text COLLATE "C" NOT NULL,
  seq        bigint GENERATED ALWAYS AS IDENTITY,
  worker     text        NOT NULL,
  host       text        NOT NULL,
  pid        integer     NOT NULL,
  since      timestamptz NOT NULL,
  live_until timestamptz NOT NULL,
  PRIMARY KEY (job, seq),
  UNIQUE (job, worker)
);
COMMENT ON TABLE @schema@.queue IS 'leasectl: the waiters of each job, oldest first; change it only through the functions of this schema';

-- Version 4's acquire, checktoken and _count_crashes take other arguments
-- than version 5's (slots and waiting; the token checked; the run a crash
-- is counted for): dropped, as version 2 dropped version 1's, so that a
-- version 4 client's call fails and its migration says the schema is
-- newer, and no function of version 4's rules is left beside version 5's.
DROP FUNCTION IF EXISTS @schema@.acquire(integer, text, text, text, integer, text[], bigint, bigint, integer, bigint, text, bigint, bigint, bigint);
DROP FUNCTION IF EXISTS @schema@.checktoken(integer, text);
DROP FUNCTION IF EXISTS @schema@._count_crashes(text[], timestamptz, boolean, text, text);

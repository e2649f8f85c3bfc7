-- Migration to schema version 1: the tables. Placeholders: @schema@ (the
-- namespace's schema, quoted). Times are timestamptz from the server's
-- clock_timestamp(); job IDs compare and sort byte by byte (COLLATE "C").

-- jobs: one row per job ever seen, its record (docs/design.md §5). The row
-- is the job's lock: every transition takes it FOR NO KEY UPDATE first.
CREATE TABLE @schema@.jobs (
  job           text COLLATE "C" PRIMARY KEY,
  last_token    bigint  NOT NULL DEFAULT 0,
  attempts      bigint  NOT NULL DEFAULT 0,
  crashes       integer NOT NULL DEFAULT 0, -- consecutive
  max_crashes   integer NOT NULL DEFAULT 0, -- the last run's threshold
  last_holder   text    NOT NULL DEFAULT '',
  last_host     text    NOT NULL DEFAULT '',
  last_success  timestamptz,
  events        bigint  NOT NULL DEFAULT 0, -- history events ever recorded: the last one's seq
  -- quarantine, when q_since is set
  q_since       timestamptz,
  q_by          text,
  q_reason      text,
  q_crashes     integer,
  q_last_holder text,
  q_last_host   text,
  -- the last run's outcome, when o_result is set
  o_result      text,
  o_exit_code   integer,
  o_signal      integer,
  o_duration_ns bigint,
  o_reason      text,
  o_worker      text,
  o_token       bigint,
  o_finished    timestamptz
);
CREATE INDEX jobs_quarantined ON @schema@.jobs (job) WHERE q_since IS NOT NULL;
COMMENT ON TABLE @schema@.jobs IS 'leasectl: one row per job, its record; change it only through the functions of this schema';

-- runs: the current run of a job, its liveness (until live_until) and its
-- evidence (until evidence_until); deleted when the run ends or its crash
-- is counted. Indexed by liveness expiry, so that a scan reads the expired
-- runs only.
CREATE TABLE @schema@.runs (
  job            text COLLATE "C" PRIMARY KEY,
  holder         text        NOT NULL,
  token          bigint      NOT NULL,
  host           text        NOT NULL,
  pid            integer     NOT NULL,
  command        text[]      NOT NULL,
  started        timestamptz NOT NULL,
  attempt        bigint      NOT NULL,
  evidence_ttl   interval    NOT NULL,
  max_crashes    integer     NOT NULL,
  live_until     timestamptz NOT NULL,
  evidence_until timestamptz NOT NULL
);
CREATE INDEX runs_live_until ON @schema@.runs (live_until);
COMMENT ON TABLE @schema@.runs IS 'leasectl: runs in flight (liveness and crash evidence); change it only through the functions of this schema';

-- history: each job's last events, seq rising by one per event.
CREATE TABLE @schema@.history (
  job    text COLLATE "C" NOT NULL,
  seq    bigint      NOT NULL,
  at     timestamptz NOT NULL,
  kind   text        NOT NULL,
  worker text        NOT NULL,
  token  bigint      NOT NULL, -- 0: none
  detail text        NOT NULL,
  PRIMARY KEY (job, seq)
);
COMMENT ON TABLE @schema@.history IS 'leasectl: the last events of each job';

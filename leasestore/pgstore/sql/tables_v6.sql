-- Migration to schema version 6: the notices a reaper sends (docs/semantics.md,
-- Notices). A table of its own, made only if missing, that no earlier
-- table refers to, so the step does not depend on the one before it.
-- Placeholders: @schema@ (the namespace's schema, quoted).

-- notices: one row per notice, its record the JSON that package rules
-- reads and writes (leasestore/noticebook), changed only by notice_swap's
-- compare-and-swap.
CREATE TABLE IF NOT EXISTS @schema@.notices (
  key text PRIMARY KEY,
  rec text NOT NULL
);

-- acquire: grant the job's lease in a free slot (docs/semantics.md,
-- Acquire, and Slots and the queue), in one transaction, the clock read
-- once after the job's lock is taken; the steps are package rules'
-- Acquire, in its order.
-- Parameters: schema version, job, holder, host, pid, command, ttl (µs),
--   evidence ttl (µs), max crashes, min interval (µs, 0: off), region
--   ('': none), deadline (µs, 0: none), expectation every and grace (µs;
--   NULL: none), slots (0 or 1: one), whether the holder waits.
-- Returns a JSON object; by "k":
--   gaveup      now (the holder gave up on its grant: recordlate.sql)
--   ok          now, token, attempt, slot, recovered (the first crash
--               counted, or null)
--   held        now, slots (the job's), position (in the queue, from 1;
--               0: not waiting), waiting (the queue's length), and the
--               live run that expires first: holder, host, pid, token,
--               since, expires (all null when a slot is free but promised
--               to earlier waiters)
--   slots       now, slots (those of the job's runs in flight)
--   quarantined now, q (the quarantine)
--   region      now, region (the job's)
--   deadline    now
--   toosoon     now, last_success
-- Every refusal but held takes the holder out of the queue (_refused).
-- Times are microseconds since the Unix epoch.
CREATE OR REPLACE FUNCTION @schema@.acquire(p_version integer, p_job text, p_holder text, p_host text,
  p_pid integer, p_command text[], p_ttl_us bigint, p_evidence_ttl_us bigint, p_max_crashes integer,
  p_min_interval_us bigint, p_region text, p_deadline_us bigint, p_expect_every_us bigint,
  p_expect_grace_us bigint, p_slots integer, p_wait boolean) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  r @schema@.runs;
  v_now timestamptz;
  v_slots integer := greatest(p_slots, 1);
  v_crash json;
  v_recovered json;
  v_live integer;      -- the job's live runs
  v_stale boolean;     -- it has runs whose liveness expired
  v_crashed boolean;   -- ... some with their evidence there
  v_mine integer;      -- the slot of the holder's live run
  v_lapsed integer;    -- places in the queue that lapsed
  v_queued integer;    -- places that did not
  v_seq bigint;        -- the holder's place, if it did not lapse,
  v_until timestamptz; -- ... and when it lapses
  v_ahead integer;
  v_position integer := 0;
  v_slot integer;
  v_token bigint;
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    INSERT INTO @schema@.jobs (job) VALUES (p_job) ON CONFLICT DO NOTHING;
    SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  END IF;
  v_now := clock_timestamp();

  -- 0. The holder gave up on its grant (recordlate with token 0): its
  -- request, arriving now, would grant a lease nobody runs.
  IF j.gave_up = p_holder THEN
    RETURN @schema@._refused(p_job, p_holder, v_now, json_build_object('k', 'gaveup', 'now', @schema@._us(v_now)));
  END IF;

  -- The job's runs, in one read.
  SELECT count(*) FILTER (WHERE live_until > v_now), coalesce(bool_or(live_until <= v_now), false),
    coalesce(bool_or(live_until <= v_now AND evidence_until > v_now), false),
    min(slot) FILTER (WHERE holder = p_holder AND live_until > v_now)
  INTO v_live, v_stale, v_crashed, v_mine
  FROM @schema@.runs WHERE job = p_job;

  -- 1. Asked again by the holder of a live run (its first answer was
  -- lost): the same lease, renewed as renew does. Nothing else changes.
  IF v_mine IS NOT NULL THEN
    SELECT * INTO r FROM @schema@.runs WHERE job = p_job AND slot = v_mine;
    UPDATE @schema@.runs SET live_until = v_now + @schema@._micros(p_ttl_us),
      evidence_until = v_now + r.evidence_ttl
    WHERE job = p_job AND slot = r.slot;
    RETURN json_build_object('k', 'ok', 'now', @schema@._us(v_now), 'token', r.token, 'attempt', r.attempt,
      'slot', r.slot);
  END IF;

  -- 2. Quarantined.
  IF j.q_since IS NOT NULL THEN
    RETURN @schema@._refused(p_job, p_holder, v_now,
      json_build_object('k', 'quarantined', 'now', @schema@._us(v_now), 'q', @schema@._quarantine_json(j)));
  END IF;

  -- 3. Another region's request: refused whether the job is held or free.
  IF p_region <> '' AND j.region IS NOT NULL AND j.region <> p_region THEN
    RETURN @schema@._refused(p_job, p_holder, v_now,
      json_build_object('k', 'region', 'now', @schema@._us(v_now), 'region', j.region));
  END IF;

  -- 4. The crashes of runs whose liveness expired with their evidence
  -- there, slot by slot, until one quarantines the job.
  IF v_crashed THEN
    FOR r IN SELECT * FROM @schema@.runs WHERE job = p_job AND live_until <= v_now AND evidence_until > v_now
        ORDER BY slot LOOP
      v_crash := @schema@._count_crashes(ARRAY[p_job], v_now, r.token, NULL, 'acquire') -> 0;
      v_recovered := coalesce(v_recovered, v_crash);
      SELECT * INTO j FROM @schema@.jobs WHERE job = p_job;
      IF j.q_since IS NOT NULL THEN
        RETURN @schema@._refused(p_job, p_holder, v_now,
          json_build_object('k', 'quarantined', 'now', @schema@._us(v_now), 'q', @schema@._quarantine_json(j)));
      END IF;
    END LOOP;
  END IF;

  -- 5. All runs of a job in flight agree on its slots.
  IF v_live > 0 AND v_slots <> j.slots THEN
    RETURN @schema@._refused(p_job, p_holder, v_now,
      json_build_object('k', 'slots', 'now', @schema@._us(v_now), 'slots', j.slots));
  END IF;

  -- 6. Held: no more slots free than waiters ahead of the request (its
  -- place in the queue, or the whole queue), once lapsed places are gone.
  SELECT count(*) FILTER (WHERE live_until <= v_now), count(*) FILTER (WHERE live_until > v_now),
    min(seq) FILTER (WHERE worker = p_holder AND live_until > v_now),
    min(live_until) FILTER (WHERE worker = p_holder AND live_until > v_now)
  INTO v_lapsed, v_queued, v_seq, v_until
  FROM @schema@.queue WHERE job = p_job;
  IF v_lapsed > 0 THEN
    DELETE FROM @schema@.queue WHERE job = p_job AND live_until <= v_now;
  END IF;
  v_ahead := v_queued;
  IF v_seq IS NOT NULL THEN
    SELECT count(*) INTO v_ahead FROM @schema@.queue WHERE job = p_job AND seq < v_seq;
  END IF;
  IF v_slots - v_live <= v_ahead THEN
    IF p_wait THEN
      -- It joins the queue at its tail, or keeps its place alive once at
      -- most half its TTL is left (every waiter asks once per heartbeat,
      -- and each ask would otherwise write).
      v_position := v_ahead + 1;
      IF v_seq IS NULL THEN
        INSERT INTO @schema@.queue (job, worker, host, pid, since, live_until)
        VALUES (p_job, p_holder, p_host, p_pid, v_now, v_now + @schema@._micros(p_ttl_us));
        v_queued := v_queued + 1;
      ELSIF 2 * (@schema@._us(v_until) - @schema@._us(v_now)) <= p_ttl_us THEN
        UPDATE @schema@.queue SET live_until = v_now + @schema@._micros(p_ttl_us) WHERE job = p_job AND seq = v_seq;
      END IF;
    END IF;
    -- The live run that expires first; none when a slot is free but
    -- promised to earlier waiters.
    r := NULL;
    IF v_live >= v_slots THEN
      SELECT * INTO r FROM @schema@.runs WHERE job = p_job AND live_until > v_now ORDER BY live_until, slot LIMIT 1;
    END IF;
    RETURN json_build_object('k', 'held', 'now', @schema@._us(v_now), 'slots', j.slots, 'position', v_position,
      'waiting', v_queued, 'holder', r.holder, 'host', r.host, 'pid', r.pid, 'token', r.token,
      'since', @schema@._us(r.started), 'expires', @schema@._us(r.live_until));
  END IF;

  -- 7. Past the deadline: refused, the crashes counted above stay counted.
  IF p_deadline_us <> 0 AND @schema@._us(v_now) > p_deadline_us THEN
    RETURN @schema@._refused(p_job, p_holder, v_now, json_build_object('k', 'deadline', 'now', @schema@._us(v_now)));
  END IF;

  -- 8. Too soon after the last success.
  IF p_min_interval_us > 0 AND j.last_success IS NOT NULL
     AND v_now < j.last_success + @schema@._micros(p_min_interval_us) THEN
    RETURN @schema@._refused(p_job, p_holder, v_now,
      json_build_object('k', 'toosoon', 'now', @schema@._us(v_now), 'last_success', @schema@._us(j.last_success)));
  END IF;

  -- 9. The grant, in the lowest slot no live run holds. The runs left
  -- without liveness are those whose evidence expired unseen: dropped.
  IF v_stale THEN
    DELETE FROM @schema@.runs WHERE job = p_job AND live_until <= v_now;
  END IF;
  v_slot := 0;
  IF v_live > 0 THEN
    SELECT min(s) INTO v_slot FROM generate_series(0, v_live) s
    WHERE NOT EXISTS (SELECT FROM @schema@.runs WHERE job = p_job AND slot = s);
  END IF;
  -- Never below the clock: tokens rise even after the job's rows were
  -- deleted or the tables truncated.
  v_token := greatest(j.last_token + 1, @schema@._us(v_now));
  INSERT INTO @schema@.runs (job, slot, holder, token, host, pid, command, started, attempt, evidence_ttl,
    max_crashes, live_until, evidence_until)
  VALUES (p_job, v_slot, p_holder, v_token, p_host, p_pid, p_command, v_now, j.attempts + 1,
    @schema@._micros(p_evidence_ttl_us), p_max_crashes, v_now + @schema@._micros(p_ttl_us),
    v_now + @schema@._micros(p_evidence_ttl_us));
  IF v_seq IS NOT NULL THEN
    DELETE FROM @schema@.queue WHERE job = p_job AND seq = v_seq;
  END IF;
  -- The detail leaves out host and pid (docs/semantics.md, History events):
  -- the run's row has them while it lasts, and the default worker ID
  -- (host:pid:random) keeps them in every event.
  INSERT INTO @schema@.history (job, seq, at, kind, worker, token, detail)
  VALUES (p_job, j.events + 1, v_now, 'acquired', p_holder, v_token, 'attempt ' || (j.attempts + 1)
    || CASE WHEN v_slots > 1 THEN format(', slot %s of %s', v_slot, v_slots) ELSE '' END);
  DELETE FROM @schema@.history WHERE job = p_job AND seq <= j.events + 1 - @history@;
  UPDATE @schema@.jobs SET last_token = v_token, attempts = j.attempts + 1, max_crashes = p_max_crashes,
    last_holder = p_holder, last_host = p_host, events = j.events + 1, slots = v_slots,
    region = coalesce(j.region, nullif(p_region, ''))
  WHERE job = p_job;
  IF p_expect_every_us IS NOT NULL THEN
    PERFORM @schema@._expect(p_job, p_expect_every_us, p_expect_grace_us, v_now);
  END IF;
  -- Token feeds hear of the grant; waiters do not (nothing was freed).
  PERFORM @schema@._publish_token('g', v_token, p_job);
  RETURN json_build_object('k', 'ok', 'now', @schema@._us(v_now), 'token', v_token, 'attempt', j.attempts + 1,
    'slot', v_slot, 'recovered', v_recovered);
END $$;

-- leave: take a waiter out of the job's queue when it gives up waiting
-- (docs/semantics.md, Leave), in one transaction, the clock read once after
-- the job's lock is taken. When it leaves while a slot is free, the job's
-- waiters are notified: the slot may now be the next one's. Lapsed places
-- leave with it. No event.
-- Parameters: schema version, job, holder.
-- Returns JSON true.
CREATE OR REPLACE FUNCTION @schema@.leave(p_version integer, p_job text, p_holder text) RETURNS json
LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
DECLARE
  j @schema@.jobs;
  v_now timestamptz;
BEGIN
  IF p_version IS DISTINCT FROM @version@ THEN
    PERFORM @schema@._check_version(p_version);
  END IF;
  SELECT * INTO j FROM @schema@.jobs WHERE job = p_job FOR NO KEY UPDATE;
  IF NOT FOUND THEN
    RETURN 'true';
  END IF;
  v_now := clock_timestamp();
  DELETE FROM @schema@.queue WHERE job = p_job AND worker = p_holder;
  IF FOUND THEN
    PERFORM @schema@._left_queue(p_job, v_now);
  END IF;
  DELETE FROM @schema@.queue WHERE job = p_job AND live_until <= v_now;
  RETURN 'true';
END $$;

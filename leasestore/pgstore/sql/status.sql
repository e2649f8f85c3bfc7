-- status: one job, read-only (docs/semantics.md, Status), in one statement
-- and so one snapshot, with the clock read once.
-- Parameters: schema version, job.
-- Returns {"now", "job": the record or null, "runs": [run, ...] by slot,
--   "queue": [waiter, ...] oldest first, lapsed ones left out,
--   "history": [event, ...] oldest first}.
CREATE OR REPLACE FUNCTION @schema@.status(p_version integer, p_job text) RETURNS json
LANGUAGE plpgsql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
BEGIN
  RETURN (
    WITH c AS MATERIALIZED (SELECT clock_timestamp() AS now, @schema@._check_version(p_version))
    SELECT json_build_object(
      'now', @schema@._us(c.now),
      'job', (SELECT json_build_object('region', j.region, 'slots', j.slots, 'last_token', j.last_token, 'attempts', j.attempts, 'crashes', j.crashes,
          'max_crashes', j.max_crashes, 'last_success', @schema@._us(j.last_success),
          'x_every_us', j.x_every_us, 'x_grace_us', j.x_grace_us, 'x_since', @schema@._us(j.x_since),
          'q', CASE WHEN j.q_since IS NOT NULL THEN @schema@._quarantine_json(j) END,
          'o', CASE WHEN j.o_result IS NOT NULL THEN json_build_object('result', j.o_result,
            'exit_code', j.o_exit_code, 'signal', j.o_signal, 'duration_ns', j.o_duration_ns, 'reason', j.o_reason,
            'worker', j.o_worker, 'token', j.o_token, 'finished', @schema@._us(j.o_finished)) END)
        FROM @schema@.jobs j WHERE j.job = p_job),
      'runs', (SELECT coalesce(json_agg(json_build_object('slot', r.slot, 'holder', r.holder, 'host', r.host,
          'pid', r.pid, 'token', r.token, 'attempt', r.attempt, 'command', r.command, 'started', @schema@._us(r.started),
          'expires', @schema@._us(r.live_until), 'rtt_us', r.rtt_us, 'stop_by', r.stop_by, 'stop_reason', r.stop_reason,
          'stop_at', @schema@._us(r.stop_at), 'live', r.live_until > c.now, 'evidence', r.evidence_until > c.now)
          ORDER BY r.slot), '[]')
        FROM @schema@.runs r WHERE r.job = p_job),
      'queue', (SELECT coalesce(json_agg(json_build_object('worker', q.worker, 'host', q.host, 'pid', q.pid,
          'since', @schema@._us(q.since), 'until', @schema@._us(q.live_until)) ORDER BY q.seq), '[]')
        FROM @schema@.queue q WHERE q.job = p_job AND q.live_until > c.now),
      'history', (SELECT coalesce(json_agg(json_build_object('at', @schema@._us(h.at), 'kind', h.kind,
          'worker', h.worker, 'token', h.token, 'result', h.result, 'detail', h.detail) ORDER BY h.seq), '[]')
        FROM @schema@.history h WHERE h.job = p_job))
    FROM c);
END $$;

-- release: end a run with its outcome (docs/semantics.md, Release).
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index, slots index.
-- ARGV: shard prefix, job, token, worker, result, exit code, signal,
--       duration (ns), reason, history detail, the lease's slot (where its
--       run is looked for first).
-- Returns 1 when released; 0 when no run of the job has the token (its
-- evidence is gone: lease lost; nothing changed).
local prefix, job, token = ARGV[1], ARGV[2], ARGV[3]
local result, detail = ARGV[5], ARGV[10]
local k = declared_keys(prefix, job)
local now = now_us()
local u = run_of(k, job, token, tonumber(ARGV[11]), now)
if not u then
  return 0
end
release_run(k, job, u, now, {result = result, exit = ARGV[6], signal = ARGV[7], duration = ARGV[8],
  reason = ARGV[9], detail = detail})
return 1

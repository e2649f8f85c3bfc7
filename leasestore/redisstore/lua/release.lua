-- release: end a run with its outcome (docs/semantics.md, Release).
-- KEYS: evidence, record, history, index, quarantine set, known jobs, due index.
-- ARGV: shard prefix, job, token, worker, result, exit code, signal,
--       duration (ns), reason, history detail.
-- Returns 1 when released; 0 when the token is not current or the evidence
-- is gone (lease lost; nothing changed).
local prefix, job, token = ARGV[1], ARGV[2], ARGV[3]
local result, detail = ARGV[5], ARGV[10]
local k = declared_keys(prefix, job)
local f = evidence_of(k, token)
if not f then
  return 0
end
local now = now_us()
release_run(k, job, f, now, {result = result, exit = ARGV[6], signal = ARGV[7], duration = ARGV[8],
  reason = ARGV[9], detail = detail})
return 1

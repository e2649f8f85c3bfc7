// Package inspect is leasectl's on-call side: the reaper that finds crashed
// runs (scan), quarantine, job status, the listing of live leases, fencing
// token checks, the reaper's Prometheus metrics, and the rendering of all of
// it as terminal tables, tab-separated lines or JSON.
//
// It uses the leasestore.Operator half of a store. What it guarantees comes from
// the store: a crash is counted exactly once, whether the reaper or the
// job's next run finds it, so several reapers may watch one store. What it
// does not guarantee: that a crash is found sooner than its liveness TTL
// plus the scan interval after the supervisor vanished, or at all once its
// evidence has expired (evidence-ttl after the last renewal).
//
// # Output
//
// Every listing has three forms, chosen by FormatFor:
//
//   - On a terminal: lipgloss tables, ages relative to now ("3m ago",
//     "in 12s"), durations compact ("3m12s"), fitted to the terminal's
//     width (Printer.Width) by cutting the widest free-text columns short
//     with "…", never a token, time or count. An empty result prints one
//     line ("no crashed jobs found").
//   - Piped: one tab-separated line per row and no header line (the gh
//     convention: `leasectl ls | cut -f1` lists jobs), times in RFC 3339,
//     durations in Go syntax ("12.5s"), flags as true/false, and an empty
//     field for a value that does not exist. An empty result prints nothing
//     on stdout and its one line on stderr. Column order is the table's.
//     status and quarantine show print "key<TAB>value" lines, then one
//     "history<TAB>at<TAB>event<TAB>worker<TAB>token<TAB>detail" line per
//     event; the keys present depend on the job's state.
//   - --json: the schema below. An empty listing is [].
//
// # JSON schema
//
// Keys are snake_case and always present; times are RFC 3339 strings in UTC
// with milliseconds ("2026-03-01T02:14:07.123Z"), or null when unknown;
// durations are integer milliseconds in keys ending in _ms; tokens and
// counts are integers; a command is an array of strings. New keys may be
// added; existing keys keep their name, type and meaning.
//
// Crash — `scan` prints an array of them; `scan --watch` prints one per
// line (JSON Lines) as they are found:
//
//	{"job": string, "worker": string, "host": string, "pid": int,
//	 "token": int, "command": [string],
//	 "started_at": time, "stale_since": time, "detected_at": time,
//	 "stale_for_ms": int,      // detected_at - stale_since
//	 "crashes": int,           // consecutive crashes, this one included
//	 "quarantined": bool}      // this crash quarantined the job
//
// Overdue — `scan --overdue --json` prints {"crashes": [Crash], "overdue":
// [Overdue]} instead of the crashes' array:
//
//	{"job": string, "every_ms": int, "grace_ms": int,
//	 "last_success": time,     // null if it never succeeded
//	 "due_at": time,           // when it became overdue
//	 "silent_for_ms": int,     // since its last success, or since its
//	                           // expectation was set if it never succeeded
//	 "overdue_ms": int}        // now - due_at, by the store's clock
//
// Quarantine — `quarantine list` prints an array of them:
//
//	{"job": string, "crashes": int, "since": time, "reason": string,
//	 "by": string,             // "leasectl" for crashes, else the operator
//	 "last_worker": string, "last_host": string}
//
// `quarantine show JOB` prints one Quarantine object with two more keys:
// "max_crashes": int and "history": [Event].
//
// Action — `quarantine release`, `quarantine add`, `stop` and `expect`
// print:
//
//	{"job": string, "action": "released" | "quarantined" | "stop-requested" |
//	 "expectation-set" | "expectation-cleared",
//	 "by": string, "reason": string, "at": time,
//	 "every_ms": int, "grace_ms": int (expectation-set only)}
//
// Lease — `ls` prints an array of them:
//
//	{"job": string, "worker": string, "host": string, "pid": int,
//	 "token": int, "attempt": int, "command": [string],
//	 "started_at": time, "expires_at": time,
//	 "running_for_ms": int, "ttl_left_ms": int, "last_rtt_ms": float,
//	 "stop": {"by": string, "reason": string, "requested_at": time},
//	 "overdue": true}          // stop: only while an operator's stop is pending;
//	                           // overdue: only for a job past its
//	                           // expectation (ls)
//
// Status — `status JOB` prints:
//
//	{"job": string,
//	 "state": "IDLE" | "RUNNING" | "CRASHED" | "QUARANTINED",
//	 "region": string,         // "" when none was recorded
//	 "now": time,              // the store's clock
//	 "holder": Lease | null,   // the live lease, when RUNNING
//	 "crashed": Crash | null,  // uncounted evidence, when CRASHED
//	 "token": int,             // the last token granted, 0 if none
//	 "attempts": int, "crashes": int, "max_crashes": int,
//	 "quarantine": Quarantine | null,
//	 "last_outcome": Outcome | null, // the last run's end: its release,
//	                           // or a crash counted since (CRASHED,
//	                           // exit_code -1, duration_ms 0, the
//	                           // crash's detail as reason)
//	 "last_success": time,     // null if it never completed
//	 "history": [Event],       // oldest first, at most 20
//	 "expect": {"every_ms": int, "grace_ms": int, "since": time,
//	            "due_at": time} | null, // the job's expectation
//	 "overdue": bool}          // past it, by the store's clock
//
//	Outcome: {"result": "COMPLETED" | "FAILED" | "CRASHED" | "NOT-STARTED",
//	          "exit_code": int,  // -1 when it died of a signal
//	          "signal": int,     // 0 when it exited
//	          "duration_ms": int, "reason": string, "worker": string,
//	          "token": int, "finished_at": time}
//	Event:   {"at": time, "event": "acquired" | "released" | "crashed" |
//	          "quarantined" | "released-from-quarantine" | "lease-lost" |
//	          "late-outcome" | "stop-requested" | "expectation-set",
//	          "worker": string, "token": int, "detail": string}
//
// TokenCheck — `token check` prints (the exit status still says 0 valid,
// 1 stale):
//
//	{"job": string, "token": int, "valid": bool,
//	 "current_token": int,     // 0 if the store has none
//	 "live": bool,             // whether current_token's lease is live
//	 "reason": string}         // why it is stale; "" when valid
//
// # Metrics
//
// `scan --watch --metrics-addr ADDR` serves, at /metrics, on a registry of
// its own (no Go or process collectors): leasectl_recovered_crashes_total,
// leasectl_stale_duration_seconds (histogram), leasectl_reaper_runs_total,
// leasectl_reaper_errors_total, leasectl_quarantined_jobs,
// leasectl_inflight_jobs, leasectl_overdue_jobs,
// leasectl_reaper_last_success_timestamp_seconds,
// leasectl_job_series_truncated, and per job (label job_id, at most
// JobSeriesLimit jobs: jobmetrics.go) leasectl_job_last_success_timestamp_seconds,
// leasectl_job_last_run_duration_seconds, leasectl_job_last_run_result,
// leasectl_job_expected_interval_seconds, leasectl_job_overdue,
// leasectl_job_consecutive_crashes, leasectl_job_quarantined,
// leasectl_job_slots, leasectl_job_slots_in_use, leasectl_job_queue_length
// and leasectl_job_lease_lost_total. The shipped alerting rules and dashboard
// (packaging/prometheus, packaging/grafana) name only these.
package inspect

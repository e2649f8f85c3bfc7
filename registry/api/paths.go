package api

// Prefix is the versioned root of every registry route. A change that
// breaks clients gets a new version, served beside this one.
const Prefix = "/v1/registry"

// Paths of the registry's routes (docs/registry-openapi.yaml).
const (
	PathAcquire      = Prefix + "/acquire-job"      // POST: acquire (worker)
	PathHeartbeat    = Prefix + "/heartbeat"        // POST: renew (worker)
	PathComplete     = Prefix + "/complete-job"     // POST: release as completed (worker)
	PathRelease      = Prefix + "/release-job"      // POST: release with an outcome (worker)
	PathRecordLate   = Prefix + "/record-late"      // POST: record a run's outcome that did not reach the store in time (worker)
	PathLeave        = Prefix + "/leave-queue"      // POST: a waiting worker gives up its place in the job's queue (worker)
	PathStatus       = Prefix + "/job-status/"      // GET + job ID: status (reader)
	PathSubscribe    = Prefix + "/subscriptions"    // POST: subscribe (worker)
	PathSubscription = Prefix + "/subscriptions/"   // + ID; GET: wait (long-poll), DELETE: unsubscribe (worker)
	PathScan         = Prefix + "/scan"             // POST: the reaper's pass (operator)
	PathQuarantine   = Prefix + "/quarantine-job"   // POST: quarantine (operator)
	PathUnquarantine = Prefix + "/unquarantine-job" // POST: release from quarantine (operator)
	PathQuarantined  = Prefix + "/quarantined-jobs" // GET: quarantined jobs (reader)
	PathStop         = Prefix + "/stop-job"         // POST: ask a job's running child to stop (operator)
	PathJobs         = Prefix + "/jobs"             // GET ?prefix=&limit=: the known jobs' IDs (reader)
	PathExpect       = Prefix + "/expect-job"       // POST: set or clear a job's expectation (operator)
	PathOverdue      = Prefix + "/overdue-jobs"     // GET: jobs past their expectation (reader)
	PathLeases       = Prefix + "/leases"           // GET: live leases (reader)
	PathPutNotices   = Prefix + "/put-notices"      // POST: record events to notify (worker)
	PathClaimNotices = Prefix + "/claim-notices"    // POST: claim notices due for delivery (operator)
	PathSettleNotice = Prefix + "/settle-notice"    // POST: mark a claimed notice sent, or due again later (operator)
	PathNotices      = Prefix + "/notices"          // GET: the kept notices (reader)
	PathCounts       = Prefix + "/counts"           // GET: in flight and quarantined (reader)
	PathCheckToken   = Prefix + "/check-token"      // GET ?job_id=&fencing_token=: token check (reader)
	PathTokenWatches = Prefix + "/token-watches"    // POST: watch a job's fencing token (reader)
	PathTokenWatch   = Prefix + "/token-watches/"   // + ID; GET ?after=&timeout_ms=: states after SEQ (long-poll), DELETE: end the watch (reader)
	PathTokenSync    = Prefix + "/token-sync"       // POST: the token feed's heartbeat (reader)
	PathMetrics      = "/metrics"                   // GET: Prometheus metrics (reader)
	PathHealth       = "/healthz"                   // GET: liveness, no authentication
)

// Headers the registry reads besides Authorization: Bearer TOKEN.
const (
	// HeaderNamespace names the namespace the client means (its
	// --namespace); a registry serves one and refuses others. Optional.
	HeaderNamespace = "Leasectl-Namespace"
	// HeaderTimeout is how many milliseconds the client will wait for the
	// answer; the registry bounds its store call by it. Optional.
	HeaderTimeout = "Leasectl-Timeout-Ms"
	// HeaderIdempotencyKey makes a retried request safe: the registry
	// answers a repeated key with the first answer (complete, release,
	// record-late, quarantine, unquarantine, scan) or, where a remembered answer could be stale
	// (acquire, heartbeat), by doing the idempotent operation again.
	HeaderIdempotencyKey = "Idempotency-Key"
	// HeaderRequestID is echoed, or generated, for the access log.
	HeaderRequestID = "X-Request-Id"
)

// Long-poll bounds of GET PathSubscription and GET PathTokenWatch: a waiter holds one request for
// up to the timeout it asks (DefaultPollTimeoutMS when it asks none, never
// more than MaxPollTimeoutMS) instead of polling.
const (
	DefaultPollTimeoutMS = 25_000
	MaxPollTimeoutMS     = 30_000
)

// MaxTokenSyncWatches bounds the watches one POST PathTokenSync names: as
// many as a registry holds.
const MaxTokenSyncWatches = 10_000

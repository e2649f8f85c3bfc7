package registry

import (
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/leasectl/leasectl/clock/fakeclock"
	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

func TestParseTokens(t *testing.T) {
	tests := []struct {
		name, text string
		wantLine   int // 0: valid
		wantReason string
	}{
		{"roles, comments and blank lines", "# fleet\n\nworker aaaaaaaaaaaaaaaa # the CI runners\n  operator bbbbbbbbbbbbbbbb  \n\t# alice\nreader cccccccccccccccc\n", 0, ""},
		{"an unknown role", "admin aaaaaaaaaaaaaaaa\n", 1, "unknown role"},
		{"a short token", "# x\nworker short\n", 2, "shorter than 16"},
		{"three fields", "worker aaaaaaaaaaaaaaaa extra\n", 1, "want ROLE TOKEN"},
		{"a token twice", "worker aaaaaaaaaaaaaaaa\nreader aaaaaaaaaaaaaaaa\n", 2, "line 1 again"},
		{"no token", "# nothing yet\n", 0, "no token"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tokens, err := ParseTokens(strings.NewReader(tc.text), "tokens")
			if tc.wantReason == "" {
				if err != nil || tokens.Len() != 3 {
					t.Fatalf("ParseTokens = %v, %v; want 3 tokens", tokens, err)
				}
				for tok, want := range map[string]Role{"aaaaaaaaaaaaaaaa": RoleWorker, "bbbbbbbbbbbbbbbb": RoleOperator, "cccccccccccccccc": RoleReader} {
					if role, _, ok := tokens.lookup(tok); !ok || role != want {
						t.Errorf("lookup(%s) = %s, %v; want %s", tok, role, ok, want)
					}
				}
				if _, _, ok := tokens.lookup("aaaaaaaaaaaaaaab"); ok {
					t.Error("an unknown token was accepted")
				}
				return
			}
			var te *TokensError
			if !errors.As(err, &te) || te.Line != tc.wantLine || !strings.Contains(te.Reason, tc.wantReason) {
				t.Fatalf("ParseTokens = %v, want an error at line %d saying %q", err, tc.wantLine, tc.wantReason)
			}
			if strings.Contains(err.Error(), "aaaaaaaaaaaaaaaa") {
				t.Errorf("the error %q shows a token", err)
			}
		})
	}
}

// The roles of the issue: worker (acquire, heartbeat, complete, release),
// operator (also quarantine and its release, stop, scan), reader (status,
// lists, metrics), each refused what it may not do with a 403 naming the
// role; no token or an unknown one is a 401.
func TestRoles(t *testing.T) {
	srv := newTestServer(t, newFakeStore(t), nil)
	quarantine := api.NoteRequest{JobID: "j", By: "alice", Reason: "r"}
	tests := []struct {
		method, path string
		body         any
		least        Role
	}{
		{http.MethodPost, api.PathAcquire, acquireBody("j", "w", time.Minute), RoleWorker},
		{http.MethodPost, api.PathScan, struct{}{}, RoleOperator},
		{http.MethodPost, api.PathQuarantine, quarantine, RoleOperator},
		{http.MethodPost, api.PathStop, quarantine, RoleOperator},
		{http.MethodPost, api.PathExpect, api.ExpectRequest{JobID: "j", By: "alice", Expect: &api.Expectation{EveryMS: 3_600_000}}, RoleOperator},
		{http.MethodGet, api.PathOverdue, nil, RoleReader},
		{http.MethodGet, api.PathStatus + "j", nil, RoleReader},
		{http.MethodGet, api.PathLeases, nil, RoleReader},
		{http.MethodGet, api.PathMetrics, nil, RoleReader},
	}
	tokens := map[Role]string{RoleReader: readerToken, RoleWorker: workerToken, RoleOperator: operatorToken}
	for _, tc := range tests {
		for role := RoleReader; role <= RoleOperator; role++ {
			a := request(t, srv.url, tc.method, tc.path, tokens[role], tc.body)
			if role >= tc.least {
				if a.status/100 != 2 {
					t.Errorf("%s %s as %s: %d %s, want a success", tc.method, tc.path, role, a.status, a.body)
				}
				continue
			}
			e := a.err(t)
			if e.Code != api.CodeForbidden || e.Role != role.String() || e.RequiredRole != tc.least.String() ||
				!strings.Contains(e.Message, "role "+role.String()) {
				t.Errorf("%s %s as %s: %+v, want forbidden naming the role and %s", tc.method, tc.path, role, e, tc.least)
			}
		}
		for _, bad := range []string{"", "not-a-token-of-the-registry"} {
			a := request(t, srv.url, tc.method, tc.path, bad, tc.body)
			if e := a.err(t); e.Code != api.CodeUnauthenticated || a.header.Get("WWW-Authenticate") == "" {
				t.Errorf("%s %s with token %q: %+v, want unauthenticated with WWW-Authenticate", tc.method, tc.path, bad, e)
			}
		}
	}
	if a := request(t, srv.url, http.MethodGet, api.PathHealth, "", nil); a.status != http.StatusOK {
		t.Errorf("/healthz without a token: %d, want 200", a.status)
	}
}

// A replaced tokens file takes effect at once: a removed token is refused.
func TestSetTokens(t *testing.T) {
	srv := newTestServer(t, newFakeStore(t), nil)
	tokens, err := ParseTokens(strings.NewReader("reader "+readerToken+"\n"), "new")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetTokens(tokens)
	if e := request(t, srv.url, http.MethodGet, api.PathCounts, workerToken, nil).err(t); e.Code != api.CodeUnauthenticated {
		t.Errorf("a token removed from the file: %+v, want unauthenticated", e)
	}
	if a := request(t, srv.url, http.MethodGet, api.PathCounts, readerToken, nil); a.status != http.StatusOK {
		t.Errorf("a token kept in the file: %d %s", a.status, a.body)
	}
}

func TestBadRequestsNameTheField(t *testing.T) {
	srv := newTestServer(t, newFakeStore(t), nil)
	tests := []struct {
		name, method, path string
		body               any
		code, field        string
	}{
		{"a bad job ID", http.MethodPost, api.PathAcquire, api.AcquireRequest{JobID: "a b", WorkerID: "w"}, api.CodeInvalidRequest, "job_id"},
		{"no worker", http.MethodPost, api.PathAcquire, api.AcquireRequest{JobID: "j"}, api.CodeInvalidRequest, "worker_id"},
		{"a misspelt field", http.MethodPost, api.PathAcquire, `{"job_id":"j","worker_id":"w","ttl":5}`, api.CodeInvalidRequest, "ttl"},
		{"a string for a number", http.MethodPost, api.PathAcquire, `{"job_id":"j","worker_id":"w","ttl_ms":"5s"}`, api.CodeInvalidRequest, "ttl_ms"},
		{"not JSON", http.MethodPost, api.PathAcquire, `{job_id`, api.CodeInvalidRequest, "body"},
		{"no body", http.MethodPost, api.PathHeartbeat, "", api.CodeInvalidRequest, "body"},
		{"a heartbeat without its TTL", http.MethodPost, api.PathHeartbeat, api.HeartbeatRequest{JobID: "j", WorkerID: "w", FencingToken: 1}, api.CodeInvalidRequest, "ttl_ms"},
		{"an unknown result", http.MethodPost, api.PathRelease, api.ReleaseRequest{JobID: "j", WorkerID: "w", FencingToken: 1, Result: "done"}, api.CodeInvalidRequest, "result"},
		{"a token check without a token", http.MethodGet, api.PathCheckToken + "?job_id=j", nil, api.CodeInvalidRequest, "fencing_token"},
		{"a bad job in the path", http.MethodGet, api.PathStatus + "a%20b", nil, api.CodeInvalidRequest, "job_id"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := request(t, srv.url, tc.method, tc.path, operatorToken, tc.body).err(t)
			if e.Code != tc.code || e.Field != tc.field {
				t.Errorf("%+v, want %s naming field %s", e, tc.code, tc.field)
			}
		})
	}
	big := `{"job_id":"j","worker_id":"w","command":["` + strings.Repeat("x", maxBody) + `"]}`
	if e := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, big).err(t); e.Code != api.CodeRequestTooLarge {
		t.Errorf("a body over the limit: %+v, want %s", e, api.CodeRequestTooLarge)
	}
	if e := request(t, srv.url, http.MethodGet, api.PathCounts, readerToken, nil, api.HeaderNamespace, "other").err(t); e.Code != api.CodeNamespaceMismatch || e.Namespace != testNamespace {
		t.Errorf("another namespace: %+v, want %s naming %s", e, api.CodeNamespaceMismatch, testNamespace)
	}
	if e := request(t, srv.url, http.MethodGet, "/v1/registry/nothing-here", "", nil).err(t); e.Code != api.CodeNotFound {
		t.Errorf("an unknown path: %+v", e)
	}
	a := request(t, srv.url, http.MethodGet, api.PathAcquire, workerToken, nil)
	if e := a.err(t); e.Code != api.CodeMethodNotAllowed || a.header.Get("Allow") != http.MethodPost {
		t.Errorf("GET on acquire: %+v, Allow %q", e, a.header.Get("Allow"))
	}
}

// A store that fails is a 503 the client may retry; one that does not
// answer within the client's own timeout is cut off at it.
func TestStoreFailures(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, store, nil)
	store.set("acquire", &leasestore.UnavailableError{Op: "acquire", Err: errors.New("connection refused")}, false)
	a := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Minute))
	if e := a.err(t); e.Code != api.CodeStoreUnavailable || a.header.Get("Retry-After") == "" || !strings.Contains(e.Message, "connection refused") {
		t.Errorf("an unavailable store: %+v, Retry-After %q", e, a.header.Get("Retry-After"))
	}

	store.set("renew", nil, true)
	start := time.Now()
	a = request(t, srv.url, http.MethodPost, api.PathHeartbeat, workerToken,
		api.HeartbeatRequest{JobID: "j", WorkerID: "w", FencingToken: 1, TTLMS: 1000}, api.HeaderTimeout, "200")
	if e := a.err(t); e.Code != api.CodeStoreUnavailable {
		t.Errorf("a frozen store: %+v, want %s", e, api.CodeStoreUnavailable)
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("a store call bounded by a 200 ms client timeout took %s", took)
	}
}

// Complete and release remember their answers by Idempotency-Key: a retry
// whose first answer was lost gets it again instead of lease_lost. Acquire
// does the (idempotent) operation again.
func TestIdempotencyKey(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, store, nil)
	var l api.Lease
	request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Minute), api.HeaderIdempotencyKey, "k1").decode(t, &l)
	var again api.Lease
	request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Minute), api.HeaderIdempotencyKey, "k1").decode(t, &again)
	if store.count("acquire") != 2 || again.FencingToken != l.FencingToken {
		t.Errorf("acquire repeated with its key: %d store calls, token %d then %d; want 2 calls and the same lease", store.count("acquire"), l.FencingToken, again.FencingToken)
	}

	complete := api.CompleteRequest{JobID: "j", WorkerID: "w", FencingToken: l.FencingToken, Result: "s3://out/1.mp4"}
	first := request(t, srv.url, http.MethodPost, api.PathComplete, workerToken, complete, api.HeaderIdempotencyKey, "k2")
	second := request(t, srv.url, http.MethodPost, api.PathComplete, workerToken, complete, api.HeaderIdempotencyKey, "k2")
	if first.status != http.StatusOK || second.status != http.StatusOK || second.header.Get("Idempotent-Replayed") != "true" || store.count("release") != 1 {
		t.Errorf("complete repeated with its key: %d then %d (replayed %q), %d store calls; want the first answer again, one call",
			first.status, second.status, second.header.Get("Idempotent-Replayed"), store.count("release"))
	}
	if e := request(t, srv.url, http.MethodPost, api.PathComplete, workerToken, complete).err(t); e.Code != api.CodeLeaseLost {
		t.Errorf("complete repeated without a key: %+v, want lease_lost", e)
	}
	complete.Result = "another"
	if e := request(t, srv.url, http.MethodPost, api.PathComplete, workerToken, complete, api.HeaderIdempotencyKey, "k2").err(t); e.Code != api.CodeIdempotencyKeyReused {
		t.Errorf("the key with another body: %+v, want %s", e, api.CodeIdempotencyKeyReused)
	}
	// Keys are the token's own: another token's request is its own.
	if e := request(t, srv.url, http.MethodPost, api.PathComplete, operatorToken, complete, api.HeaderIdempotencyKey, "k2").err(t); e.Code != api.CodeLeaseLost {
		t.Errorf("the key of another token: %+v, want the operation done (lease_lost)", e)
	}
}

// An answer the store failed to give is not remembered: a retry tries
// again.
func TestIdempotencyForgetsFailures(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, store, nil)
	var l api.Lease
	request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Minute)).decode(t, &l)
	store.set("release", &leasestore.UnavailableError{Op: "release", Err: errors.New("down")}, false)
	rel := api.ReleaseRequest{JobID: "j", WorkerID: "w", FencingToken: l.FencingToken, Result: "failed", ExitCode: 3}
	if a := request(t, srv.url, http.MethodPost, api.PathRelease, workerToken, rel, api.HeaderIdempotencyKey, "k"); a.status != http.StatusServiceUnavailable {
		t.Fatalf("release on a failing store: %d", a.status)
	}
	store.set("release", nil, false)
	if a := request(t, srv.url, http.MethodPost, api.PathRelease, workerToken, rel, api.HeaderIdempotencyKey, "k"); a.status != http.StatusOK {
		t.Errorf("the retry once the store is back: %d %s, want 200", a.status, a.body)
	}
}

func TestRateLimit(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := newTestServer(t, newFakeStore(t), func(c *Config) { c.RateLimit, c.Clock = 5, clock })
	codes := map[int]int{}
	for range 12 {
		codes[request(t, srv.url, http.MethodGet, api.PathCounts, readerToken, nil).status]++
	}
	if codes[http.StatusOK] != 10 || codes[http.StatusTooManyRequests] != 2 {
		t.Errorf("12 requests at once with a limit of 5/s (bursts of 10): %v, want 10 answered and 2 refused", codes)
	}
	clock.Advance(time.Second)
	if a := request(t, srv.url, http.MethodGet, api.PathCounts, readerToken, nil); a.status != http.StatusOK {
		t.Errorf("a second later: %d, want 200", a.status)
	}
}

// Guessing tokens is slowed down even without a rate limit; a good token
// is not.
func TestFailedAuthenticationsAreLimited(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	srv := newTestServer(t, newFakeStore(t), func(c *Config) { c.Clock = clock })
	codes := map[int]int{}
	for range authFailureBurst + 5 {
		codes[request(t, srv.url, http.MethodGet, api.PathCounts, "guess-guess-guess-guess", nil).status]++
	}
	if codes[http.StatusUnauthorized] != authFailureBurst || codes[http.StatusTooManyRequests] != 5 {
		t.Errorf("%d wrong tokens at once: %v, want %d refused with 401, then 5 with 429", authFailureBurst+5, codes, authFailureBurst)
	}
	if a := request(t, srv.url, http.MethodGet, api.PathCounts, readerToken, nil); a.status != http.StatusOK {
		t.Errorf("a good token after the guesses: %d", a.status)
	}
}

func TestMetrics(t *testing.T) {
	reaper := inspect.NewMetrics()
	srv := newTestServer(t, newFakeStore(t), func(c *Config) { c.ReaperMetrics = reaper })
	request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Minute))
	request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "other", time.Minute))
	a := request(t, srv.url, http.MethodGet, api.PathMetrics, readerToken, nil)
	if !strings.HasPrefix(a.header.Get("Content-Type"), "text/plain; version=0.0.4") {
		t.Errorf("metrics content type %q", a.header.Get("Content-Type"))
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(string(a.body)))
	if err != nil {
		t.Fatalf("metrics do not parse: %v\n%s", err, a.body)
	}
	for _, name := range []string{"leasectl_registry_requests_total", "leasectl_registry_request_duration_seconds",
		"leasectl_registry_inflight_requests", "leasectl_registry_subscriptions", "leasectl_reaper_runs_total"} {
		if families[name] == nil {
			t.Errorf("no %s in /metrics", name)
		}
	}
	for _, want := range []string{`route="acquire-job",code="200"} 1`, `route="acquire-job",code="409"} 1`} {
		if !strings.Contains(string(a.body), want) {
			t.Errorf("/metrics lacks %s:\n%s", want, a.body)
		}
	}
}

// The access log has a line per request with job, worker and fencing
// token, and never a bearer token.
func TestAccessLog(t *testing.T) {
	srv := newTestServer(t, newFakeStore(t), nil)
	var l api.Lease
	request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("video_encode_12345", "worker-7", time.Minute)).decode(t, &l)
	request(t, srv.url, http.MethodGet, api.PathCounts, "wrong-token-wrong-token", nil)
	log := srv.log.String()
	for _, secret := range []string{workerToken, "wrong-token-wrong-token"} {
		if strings.Contains(log, secret) {
			t.Errorf("the log shows a bearer token:\n%s", log)
		}
	}
	for _, want := range []string{`"route":"acquire-job"`, `"job":"video_encode_12345"`, `"worker":"worker-7"`, `"role":"worker"`, `"code":"unauthenticated"`} {
		if !strings.Contains(log, want) {
			t.Errorf("the access log lacks %s:\n%s", want, log)
		}
	}
	if !strings.Contains(log, `"token":`) {
		t.Errorf("the access log lacks the fencing token:\n%s", log)
	}
}

func TestNewValidates(t *testing.T) {
	store := leasestore.New(newFakeStore(t))
	for name, cfg := range map[string]Config{
		"no store":           {Namespace: testNamespace, Tokens: testTokens(t)},
		"no tokens":          {Store: store, Namespace: testNamespace},
		"a bad namespace":    {Store: store, Namespace: "a b", Tokens: testTokens(t)},
		"a negative limit":   {Store: store, Namespace: testNamespace, Tokens: testTokens(t), RateLimit: -1},
		"a negative timeout": {Store: store, Namespace: testNamespace, Tokens: testTokens(t), OpTimeout: -time.Second},
	} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New with %s succeeded", name)
		}
	}
}

// limitedStore is a store that honours TTLs of 2 s to an hour only, as
// etcd's does.
type limitedStore struct{ *fakeStore }

func (limitedStore) Limits() leasestore.Limits {
	return leasestore.Limits{MinTTL: 2 * time.Second, MaxTTL: time.Hour, MaxSlots: leasestore.MaxSlots}
}

// A TTL the store behind would round or refuse is refused, naming the
// range: the worker cannot check it itself, since the remote store cannot
// know the range without asking.
func TestTTLOutsideTheStoresRange(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, limitedStore{store}, nil)
	e := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Second)).err(t)
	if e.Code != api.CodeInvalidRequest || e.Field != "ttl_ms" || !strings.Contains(e.Message, "2s to 1h0m0s") || store.count("acquire") != 0 {
		t.Errorf("a 1 s TTL in front of a store of 2 s or more: %+v (%d store calls), want ttl_ms refused naming the range", e, store.count("acquire"))
	}
	hb := api.HeartbeatRequest{JobID: "j", WorkerID: "w", FencingToken: 1, TTLMS: 2 * 3600 * 1000}
	if e := request(t, srv.url, http.MethodPost, api.PathHeartbeat, workerToken, hb).err(t); e.Field != "ttl_ms" {
		t.Errorf("a heartbeat with a 2 h TTL: %+v", e)
	}
	if a := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", 3*time.Second)); a.status != http.StatusOK {
		t.Errorf("a TTL in range: %d %s", a.status, a.body)
	}
}

// oneSlotStore is a store whose Limits leave MaxSlots zero: one slot per
// job.
type oneSlotStore struct{ *fakeStore }

func (oneSlotStore) Limits() leasestore.Limits { return leasestore.Limits{} }

// More slots than the store behind grants a job are refused, naming its
// most, before the store hears of them; a zero MaxSlots is one slot.
func TestSlotsAboveTheStoresMost(t *testing.T) {
	store := newFakeStore(t)
	srv := newTestServer(t, oneSlotStore{store}, nil)
	two := acquireBody("j", "w", time.Minute)
	two.Slots = 2
	e := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, two).err(t)
	if e.Code != api.CodeInvalidRequest || e.Field != "slots" || !strings.HasSuffix(e.Message, "2 is more than the 1 the store behind the registry runs per job") || store.count("acquire") != 0 {
		t.Errorf("2 slots in front of a one-slot store: %+v (%d store calls), want slots refused naming 1", e, store.count("acquire"))
	}
	one := acquireBody("j", "w", time.Minute)
	one.Slots = 1
	if a := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, one); a.status != http.StatusOK {
		t.Errorf("1 slot: %d %s", a.status, a.body)
	}
}

package httpstore_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/internal/registrytest"
	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/httpstore"
	"github.com/leasectl/leasectl/leasestore/storetest"
	"github.com/leasectl/leasectl/registry"
	"github.com/leasectl/leasectl/registry/api"
)

func TestOpenURLs(t *testing.T) {
	certs, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		url    string
		opts   httpstore.Options
		reason string // "": valid
	}{
		{"https://registry.internal:8443", httpstore.Options{}, ""},
		{"https://a.internal:8443,b.internal:8443/leasectl", httpstore.Options{}, ""},
		{"http://127.0.0.1:8080,[::1]:8080", httpstore.Options{}, ""},
		{"http://127.0.0.1:8080,registry.internal:8080", httpstore.Options{}, "only to a loopback address"},
		{"https://a.internal:8443,", httpstore.Options{}, "no host"},
		{"https://registry.internal:8443/leasectl/?region=us-east-1", httpstore.Options{CAFile: certs.CA}, ""},
		{"http://127.0.0.1:8080", httpstore.Options{}, ""},
		{"http://[::1]:8080", httpstore.Options{}, ""},
		{"http://localhost:8080", httpstore.Options{}, ""},
		{"http://registry.internal:8080", httpstore.Options{}, "only to a loopback address"},
		{"http://10.0.0.1:8080", httpstore.Options{}, "only to a loopback address"},
		{"https://:token@registry.internal", httpstore.Options{}, "LEASECTL_TOKEN"},
		{"https://registry.internal?timeout=5s", httpstore.Options{}, `unknown parameter "timeout"`},
		{"https://registry.internal?region=us%20east", httpstore.Options{}, "region"},
		{"https:///nohost", httpstore.Options{}, "no host"},
		{"https://registry.internal", httpstore.Options{CAFile: filepath.Join(t.TempDir(), "missing.pem")}, "LEASECTL_CA_FILE"},
		{"https://registry.internal", httpstore.Options{CAFile: certs.ServerKey}, "no PEM certificate"},
		{"https://registry.internal", httpstore.Options{ClientCert: certs.ClientCert}, "LEASECTL_CLIENT_KEY"},
		{"https://registry.internal", httpstore.Options{ClientCert: certs.ClientCert, ClientKey: certs.ClientKey}, ""},
	}
	for _, tc := range tests {
		s, err := httpstore.Open(tc.url, "leasectl", tc.opts)
		if tc.reason == "" {
			if err != nil {
				t.Errorf("Open(%s): %v", tc.url, err)
			} else {
				s.Close()
			}
			continue
		}
		var ue *leasestore.URLError
		if !errors.As(err, &ue) || !strings.Contains(err.Error(), tc.reason) {
			t.Errorf("Open(%s) = %v, want a URLError saying %q", tc.url, err, tc.reason)
		}
		if err != nil && strings.Contains(err.Error(), ":token@") {
			t.Errorf("the error %q shows the password", err)
		}
	}
}

// wantAuthError checks the one line a command would print: for a 401 the
// store is unavailable (exit 69), for a 403 the operation is forbidden to
// the token's role (leasestore.ErrForbidden, exit 79), and the line names
// authentication or the role.
func wantAuthError(t *testing.T, err error, status int, says ...string) {
	t.Helper()
	var ae *httpstore.AuthError
	want := leasestore.ErrUnavailable
	if status == http.StatusForbidden {
		want = leasestore.ErrForbidden
	}
	if !errors.Is(err, want) || !errors.As(err, &ae) || ae.Status != status {
		t.Fatalf("got %v, want %v caused by a %d AuthError", err, want, status)
	}
	if status == http.StatusForbidden && errors.Is(err, leasestore.ErrUnavailable) {
		t.Errorf("%v: a role refused is not an unavailable store", err)
	}
	for _, s := range says {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("%q does not say %q", err, s)
		}
	}
}

func TestAuthErrors(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.Start(t, leasestore.New(backend), "leasectl")
	req := storetest.Request("job", "w", time.Minute)

	_, err = reg.Open(t, "leasectl", "").Acquire(storetest.Ctx(t), req)
	wantAuthError(t, err, http.StatusUnauthorized, "authentication", "no bearer token", "LEASECTL_TOKEN")
	_, err = reg.Open(t, "leasectl", "a-token-the-registry-does-not-know").Acquire(storetest.Ctx(t), req)
	wantAuthError(t, err, http.StatusUnauthorized, "authentication", "LEASECTL_TOKEN")
	if strings.Contains(err.Error(), "a-token-the-registry-does-not-know") {
		t.Errorf("the error %q shows the token", err)
	}
	_, err = reg.Open(t, "leasectl", registrytest.WorkerToken).Scan(storetest.Ctx(t))
	wantAuthError(t, err, http.StatusForbidden, "role worker", "operator")
	_, err = reg.Open(t, "leasectl", registrytest.ReaderToken).Acquire(storetest.Ctx(t), req)
	wantAuthError(t, err, http.StatusForbidden, "role reader", "worker")
}

// A registry's 400 is the caller's input refused, a usage error, not an
// unavailable store: another namespace than the registry's, which is
// refused rather than served from the wrong one, and a field the registry
// will not take.
func TestBadRequests(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.Start(t, leasestore.New(backend), "leasectl")
	req := storetest.Request("job", "w", time.Minute)
	_, err = reg.Open(t, "team-b", registrytest.WorkerToken).Acquire(storetest.Ctx(t), req)
	var nsErr *leasestore.NamespaceError
	if !errors.As(err, &nsErr) || nsErr.Namespace != "team-b" || !strings.Contains(err.Error(), `serves namespace "leasectl"`) {
		t.Errorf("another namespace: %v, want a NamespaceError naming the registry's", err)
	}
	req.Holder = "w\x01" // the registry takes no control character in a worker ID
	_, err = reg.Open(t, "leasectl", registrytest.WorkerToken).Acquire(storetest.Ctx(t), req)
	var reqErr *leasestore.RequestError
	if !errors.As(err, &reqErr) || reqErr.Field != "worker_id" || errors.Is(err, leasestore.ErrUnavailable) {
		t.Errorf("a control character in the worker ID: %v, want a RequestError naming worker_id", err)
	}
}

// Renew makes one attempt, and returns by its ctx's deadline when the
// registry does not answer: the supervisor's safety window counts from
// before the call.
func TestRenewReturnsByItsDeadline(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	held := make(chan struct{})
	var requests atomic.Int32
	srv := &http.Server{Handler: http.HandlerFunc(func(_ http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		select {
		case <-held:
		case <-r.Context().Done():
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { close(held); srv.Close() })

	s, err := httpstore.Open("http://"+ln.Addr().String(), "leasectl", httpstore.Options{Token: registrytest.WorkerToken})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	const bound = 300 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), bound)
	defer cancel()
	start := time.Now()
	err = s.Renew(ctx, &leasestore.Lease{Job: "j", Holder: "w", Token: 1, TTL: time.Second})
	took := time.Since(start)
	if !errors.Is(err, leasestore.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Renew against a registry that does not answer: %v, want unavailable at the deadline", err)
	}
	if took > bound+200*time.Millisecond {
		t.Errorf("Renew bounded by %s returned after %s", bound, took)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("Renew sent %d requests, want exactly one", n)
	}
}

// A release sent again after its answer was lost gets the first answer
// (its Idempotency-Key is the lease's and the outcome's), not
// ErrLeaseLost; a release of the same lease with another outcome is
// refused.
func TestReleaseRetriedGetsTheFirstAnswer(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.Start(t, leasestore.New(backend), "leasectl")
	s := reg.Open(t, "leasectl", registrytest.WorkerToken)
	l := storetest.Acquire(t, s, storetest.Request("job", "w", time.Minute))
	out := storetest.Outcome(leasestore.ResultCompleted)
	for i := range 2 {
		if err := s.Release(storetest.Ctx(t), l, out); err != nil {
			t.Fatalf("release %d: %v", i+1, err)
		}
	}
	if err := s.Release(storetest.Ctx(t), l, storetest.Outcome(leasestore.ResultFailed)); !errors.Is(err, leasestore.ErrLeaseLost) {
		t.Errorf("a release of a released lease with another outcome: %v, want ErrLeaseLost", err)
	}
	if st := storetest.Status(t, s, "job"); len(st.History) != 2 {
		t.Errorf("history %+v, want one acquire and one release", st.History)
	}
}

// The URL's region goes with every acquire.
func TestRegionFromTheURL(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.Start(t, leasestore.New(backend), "leasectl")
	open := func(region string) *httpstore.Store {
		s, err := httpstore.Open(reg.URL+"?region="+region, "leasectl", httpstore.Options{Token: registrytest.WorkerToken, CAFile: reg.Certs.CA})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	us := open("us-east-1")
	storetest.Release(t, us, storetest.Acquire(t, us, storetest.Request("job", "a", time.Minute)), leasestore.ResultCompleted)
	if st := storetest.Status(t, us, "job"); st.Region != "us-east-1" {
		t.Errorf("region %q, want us-east-1 from the URL", st.Region)
	}
	var re *leasestore.RegionError
	if _, err := open("eu-west-1").Acquire(storetest.Ctx(t), storetest.Request("job", "b", time.Minute)); !errors.As(err, &re) || re.Region != "us-east-1" {
		t.Errorf("an acquire from eu-west-1: %v, want a RegionError naming us-east-1", err)
	}
}

// A subscription rides out a registry restart: it is made again, and the
// waiter woken once in case a release was missed; releases after it are
// delivered.
func TestSubscriptionAcrossARegistryRestart(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	certs, err := testcert.Generate(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	serve := func(ln net.Listener) (stop func()) {
		tokens, err := registry.ParseTokens(strings.NewReader(registrytest.TokensFile), "tokens")
		if err != nil {
			t.Fatal(err)
		}
		srv, err := registry.New(registry.Config{Store: leasestore.New(backend), Namespace: "leasectl", Tokens: tokens, Log: zerolog.Nop()})
		if err != nil {
			t.Fatal(err)
		}
		tlsConf, err := registry.LoadTLS(registry.TLSFiles{Cert: certs.ServerCert, Key: certs.ServerKey})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- srv.Serve(ctx, ln, tlsConf) }()
		return func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("registry: %v", err)
			}
		}
	}
	stop := serve(ln)

	s, err := httpstore.Open("https://"+addr, "leasectl", httpstore.Options{Token: registrytest.WorkerToken, CAFile: certs.CA})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sub, err := s.Subscribe(storetest.Ctx(t), "job", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	awaitWake := func(what string) {
		t.Helper()
		select {
		case <-sub.Released():
		case <-time.After(storetest.HangGuard * 2):
			t.Fatalf("no wake-up after %s", what)
		}
	}

	stop() // the long-poll in progress is answered shutting_down
	ln, err = net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening again on %s: %v", addr, err)
	}
	stop = serve(ln)
	defer func() { stop() }()
	awaitWake("the registry restarted")

	l := storetest.Acquire(t, s, storetest.Request("job", "a", time.Minute))
	storetest.Release(t, s, l, leasestore.ResultCompleted)
	awaitWake("a release after the restart")
}

// A redirect is not followed (it would take the bearer token elsewhere):
// the store is unavailable, and the error says what answered.
func TestRedirectsAreNotFollowed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var followed atomic.Bool
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/elsewhere" {
			followed.Store(true)
		}
		http.Redirect(w, r, "/elsewhere", http.StatusTemporaryRedirect)
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { srv.Close() })
	s, err := httpstore.Open("http://"+ln.Addr().String(), "leasectl", httpstore.Options{Token: registrytest.WorkerToken})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	_, err = s.Status(storetest.Ctx(t), "job")
	if !errors.Is(err, leasestore.ErrUnavailable) || !strings.Contains(err.Error(), "307") || followed.Load() {
		t.Errorf("Status answered by a redirect: %v (followed: %v), want unavailable naming the 307, not followed", err, followed.Load())
	}
}

// A registry older than round trips refuses the heartbeat's rtt_us as an
// unknown field, renewing nothing: Renew sends the heartbeat again without
// it, and leaves it out from then on.
func TestRenewToARegistryWithoutRoundTrips(t *testing.T) {
	var withRTT, without atomic.Int32
	s := olderRegistry(t, refusing(t, "rtt_us", `{"new_lease_expiry":"2026-03-01T12:00:00Z","ttl_ms":1000}`, &withRTT, &without))
	l := &leasestore.Lease{Job: "j", Holder: "w", Token: 1, TTL: time.Second, RTT: 3 * time.Millisecond}
	for i := range 2 {
		if err := s.Renew(storetest.Ctx(t), l); err != nil {
			t.Fatalf("renew %d: %v", i+1, err)
		}
	}
	if withRTT.Load() != 1 || without.Load() != 2 {
		t.Errorf("%d heartbeats with rtt_us and %d without, want 1 refused and then 2 without", withRTT.Load(), without.Load())
	}
}

// A token watch rides out a registry restart: the poll's failure is
// reported Lost, the heartbeat fails until the watch is made again, and
// its first state then is a fresh read, which shows the grant made while
// the registry was down.
func TestTokenWatchAcrossARegistryRestart(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	reg := registrytest.Start(t, leasestore.New(backend), "leasectl")
	s := leasestore.New(reg.Open(t, "leasectl", registrytest.ReaderToken))
	log := storetest.Watch(t, s, "job")

	reg.Stop(t)
	log.Await(t, "lost", func(st leasestore.TokenState) bool { return st.Lost })
	if err := s.SyncTokens(storetest.Ctx(t)); !errors.Is(err, leasestore.ErrUnavailable) {
		t.Errorf("SyncTokens with the watch lost: %v, want unavailable", err)
	}
	l := storetest.Acquire(t, backend, storetest.Request("job", "a", time.Minute))
	reg.Resume(t)
	st := log.Await(t, "read after the restart", storetest.IsState(l.Token, true))
	if !st.Read {
		t.Errorf("the first state after the restart %+v, want a read", st)
	}
	if err := s.SyncTokens(storetest.Ctx(t)); err != nil {
		t.Errorf("SyncTokens once the watch is made again: %v", err)
	}
}

// An older registry, whose store could lack late outcomes and a token
// feed, answers 501 with a code for each: RecordLate fails as an
// unavailable store, so that the outbox keeps the outcome, and names the
// cause; so does WatchTokens, so that fence's write-through pattern asks
// the store instead.
func TestAnOlderRegistryWithoutLateOutcomesOrAFeed(t *testing.T) {
	s := olderRegistry(t, func(w http.ResponseWriter, r *http.Request) {
		code := api.CodeNoTokenFeed
		if r.URL.Path == api.PathRecordLate {
			code = api.CodeNoLateOutcomes
		}
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotImplemented)
		_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Errorf(code, "the store behind the registry has none")})
	})
	late := leasestore.LateOutcome{Job: "job", Holder: "w", Token: 1, Outcome: storetest.Outcome(leasestore.ResultFailed)}
	if _, err := s.RecordLate(storetest.Ctx(t), late); !errors.Is(err, leasestore.ErrUnavailable) || !errors.Is(err, httpstore.ErrNoLateOutcomes) {
		t.Errorf("RecordLate through the older registry: %v, want ErrUnavailable caused by ErrNoLateOutcomes", err)
	}
	if _, err := leasestore.New(s).WatchTokens(storetest.Ctx(t), "job", func(leasestore.TokenState) {}); !errors.Is(err, leasestore.ErrUnavailable) || !errors.Is(err, httpstore.ErrNoTokenFeed) {
		t.Errorf("WatchTokens through the older registry: %v, want ErrUnavailable caused by ErrNoTokenFeed", err)
	}
}

// A late outcome is one call of the store's RecordLate in the registry: a
// second delivery gets the store's answer to it (nothing changed), not the
// first one's; a late outcome the registry refuses keeps the field at
// fault.
func TestRecordLateThroughTheRegistry(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	late := leasestore.LateOutcome{Job: "job", Holder: "w", Token: 1, Outcome: storetest.Outcome(leasestore.ResultFailed)}
	s := registrytest.Start(t, leasestore.New(backend), "leasectl").Open(t, "leasectl", registrytest.WorkerToken)
	l := storetest.Acquire(t, s, storetest.Request("job", "w", time.Minute))
	late.Token = l.Token
	if c, err := s.RecordLate(storetest.Ctx(t), late); err != nil || !c.Released {
		t.Fatalf("RecordLate of a live run: %+v, %v; want it released", c, err)
	}
	if c, err := s.RecordLate(storetest.Ctx(t), late); err != nil || c.Released || c.CrashWithdrawn {
		t.Errorf("a second delivery: %+v, %v; want nothing changed", c, err)
	}
	var re *leasestore.RequestError
	if _, err := s.RecordLate(storetest.Ctx(t), leasestore.LateOutcome{Job: "job", Holder: "w", Token: -1}); !errors.As(err, &re) || re.Field != "fencing_token" {
		t.Errorf("a late outcome with a negative token: %v, want a RequestError naming fencing_token", err)
	}
}

// A registry older than expectations refuses an acquire's expect as an
// unknown field, granting nothing: Acquire asks again without it, leaves
// it out from then on, and says the expectation was dropped.
func TestAcquireFromARegistryWithoutExpectations(t *testing.T) {
	var withExpect, without atomic.Int32
	s := olderRegistry(t, refusing(t, "expect", `{"job_id":"j","worker_id":"w","fencing_token":1,"attempt":1,"ttl_ms":1000,"granted_at":"2026-03-01T12:00:00Z"}`, &withExpect, &without))
	req := storetest.Request("j", "w", time.Second)
	req.Expect = &leasestore.Expectation{Every: time.Hour}
	for i := range 2 {
		l, err := s.Acquire(storetest.Ctx(t), req)
		if err != nil || !l.ExpectDropped {
			t.Fatalf("acquire %d: %+v, %v; want a lease with its expectation dropped", i+1, l, err)
		}
	}
	if withExpect.Load() != 1 || without.Load() != 2 {
		t.Errorf("%d acquires with expect and %d without, want 1 refused and then 2 without", withExpect.Load(), without.Load())
	}
}

// A registry older than expectations has no overdue route: Overdue's
// error says the registry cannot list them (errors.ErrUnsupported), which
// a watching reaper rides out.
func TestOverdueFromARegistryWithoutExpectations(t *testing.T) {
	s := olderRegistry(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no route ` + r.URL.Path + `"}}`))
	})
	if _, err := s.Overdue(storetest.Ctx(t)); !errors.Is(err, errors.ErrUnsupported) || !errors.Is(err, leasestore.ErrUnavailable) {
		t.Errorf("Overdue() = %v, want unavailable and unsupported", err)
	}
}

// olderRegistry serves handler as a registry of an older leasectl would
// answer, and returns a worker's store through it.
func olderRegistry(t *testing.T, handler http.HandlerFunc) *httpstore.Store {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	s, err := httpstore.Open(srv.URL, "leasectl", httpstore.Options{Token: registrytest.WorkerToken})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// refusing is how an older registry answers a request body with a field
// it does not know: refused as invalid, counted in with; without the
// field, answered ok, counted in without.
func refusing(t *testing.T, field, ok string, with, without *atomic.Int32) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
			t.Errorf("request body: %v", err)
		}
		w.Header().Set("Content-Type", "application/json")
		if _, found := body[field]; found {
			with.Add(1)
			w.WriteHeader(http.StatusBadRequest)
			_, _ = w.Write([]byte(`{"error":{"code":"invalid_request","message":"invalid ` + field + `: no such field","field":"` + field + `"}}`))
			return
		}
		without.Add(1)
		_, _ = w.Write([]byte(ok))
	}
}

// A registry older than waking waiters in turn refuses a subscription's
// worker_id as an unknown field, subscribing nothing: Subscribe asks again
// without it, and leaves it out from then on, also when the subscription
// is made again because a registry restarted as an older one lost it. Its
// waiter is then woken by every release of the job, as before.
func TestSubscribeToARegistryWithoutWaiters(t *testing.T) {
	var older atomic.Bool
	var withID, without, waits atomic.Int32
	s := olderRegistry(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == http.MethodPost && r.URL.Path == api.PathSubscribe:
			var body api.SubscribeRequest
			if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
				t.Errorf("subscribe body: %v", err)
			}
			if body.WorkerID == "" {
				without.Add(1)
			} else if withID.Add(1); older.Load() {
				w.WriteHeader(http.StatusBadRequest)
				_, _ = w.Write([]byte(`{"error":{"code":"invalid_request","message":"invalid worker_id: no such field","field":"worker_id"}}`))
				return
			}
			_, _ = w.Write([]byte(`{"subscription_id":"s","job_id":"job"}`))
		case r.Method == http.MethodGet && waits.Add(1) == 1:
			// The registry restarts as an older one, which lost the
			// subscription.
			older.Store(true)
			w.WriteHeader(http.StatusNotFound)
			_ = json.NewEncoder(w).Encode(api.ErrorBody{Error: api.Errorf(api.CodeSubscriptionNotFound, "no such subscription")})
		case r.Method == http.MethodGet:
			<-r.Context().Done()
		}
	})
	sub, err := s.Subscribe(storetest.Ctx(t), "job", "w")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Close()
	select {
	case <-sub.Released():
	case <-time.After(storetest.HangGuard):
		t.Fatalf("the subscription made again after the registry lost it did not wake its waiter within %s", storetest.HangGuard)
	}
	second, err := s.Subscribe(storetest.Ctx(t), "job", "v")
	if err != nil {
		t.Fatalf("a second Subscribe: %v", err)
	}
	defer second.Close()
	if withID.Load() != 2 || without.Load() != 2 {
		t.Errorf("%d subscribes with worker_id and %d without, want 2 with (accepted, then refused by the older registry) and then 2 without",
			withID.Load(), without.Load())
	}
}

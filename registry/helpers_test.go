package registry

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/registry/api"
)

// Tokens of the tests' registries, one per role.
const (
	workerToken   = "worker-token-0123456789"
	operatorToken = "operator-token-0123456789"
	readerToken   = "reader-token-0123456789"
	testNamespace = "leasectl"
)

func testTokens(t testing.TB) *Tokens {
	t.Helper()
	tokens, err := ParseTokens(strings.NewReader("worker "+workerToken+"\noperator "+operatorToken+"\nreader "+readerToken+"\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	return tokens
}

// fakeStore is a real embedded store whose calls are counted and can be
// made to fail or block.
type fakeStore struct {
	leasestore.Driver
	mu         sync.Mutex
	calls      map[string]int
	fail       map[string]error         // op -> the error it returns
	block      map[string]bool          // op -> block until ctx is done
	hold       map[string]chan struct{} // op -> wait for it to be closed
	entered    chan string              // receives op as a call begins, when not nil
	subscribed []*fakeSubscription
}

func newFakeStore(t testing.TB) *fakeStore {
	t.Helper()
	s, err := filestore.Open(t.TempDir(), testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	return &fakeStore{Driver: s, calls: map[string]int{}, fail: map[string]error{}, block: map[string]bool{}, hold: map[string]chan struct{}{}}
}

// enter counts op and applies its fault, if any.
func (f *fakeStore) enter(ctx context.Context, op string) error {
	f.mu.Lock()
	f.calls[op]++
	err, block, hold, entered := f.fail[op], f.block[op], f.hold[op], f.entered
	f.mu.Unlock()
	if entered != nil {
		entered <- op
	}
	if hold != nil {
		<-hold
	}
	if block {
		<-ctx.Done()
		return &leasestore.UnavailableError{Op: op, Err: ctx.Err()}
	}
	return err
}

func (f *fakeStore) count(op string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.calls[op]
}

func (f *fakeStore) set(op string, err error, block bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail[op], f.block[op] = err, block
}

func (f *fakeStore) Acquire(ctx context.Context, req leasestore.AcquireRequest) (*leasestore.Lease, error) {
	if err := f.enter(ctx, "acquire"); err != nil {
		return nil, err
	}
	return f.Driver.Acquire(ctx, req)
}

func (f *fakeStore) Renew(ctx context.Context, l *leasestore.Lease) error {
	if err := f.enter(ctx, "renew"); err != nil {
		return err
	}
	return f.Driver.Renew(ctx, l)
}

func (f *fakeStore) Release(ctx context.Context, l *leasestore.Lease, out leasestore.Outcome) error {
	if err := f.enter(ctx, "release"); err != nil {
		return err
	}
	return f.Driver.Release(ctx, l, out)
}

func (f *fakeStore) Status(ctx context.Context, job string) (*leasestore.JobStatus, error) {
	if err := f.enter(ctx, "status"); err != nil {
		return nil, err
	}
	return f.Driver.Status(ctx, job)
}

// Subscribe hands out subscriptions the test fires itself.
func (f *fakeStore) Subscribe(ctx context.Context, job, _ string) (leasestore.Subscription, error) {
	if err := f.enter(ctx, "subscribe"); err != nil {
		return nil, err
	}
	s := &fakeSubscription{job: job, released: make(chan struct{}, 1), closed: make(chan struct{})}
	f.mu.Lock()
	f.subscribed = append(f.subscribed, s)
	f.mu.Unlock()
	return s, nil
}

// release fires every open subscription to job.
func (f *fakeStore) release(job string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.subscribed {
		if s.job == job {
			select {
			case s.released <- struct{}{}:
			default:
			}
		}
	}
}

type fakeSubscription struct {
	job      string
	released chan struct{}
	once     sync.Once
	closed   chan struct{}
}

func (s *fakeSubscription) Released() <-chan struct{} { return s.released }
func (s *fakeSubscription) Close() error {
	s.once.Do(func() { close(s.closed) })
	return nil
}

// testServer is a registry served over plain HTTP by httptest, for tests
// of its handlers.
type testServer struct {
	*Server
	url string
	log *bytes.Buffer
}

func newTestServer(t testing.TB, store leasestore.Driver, edit func(*Config)) *testServer {
	t.Helper()
	var log bytes.Buffer
	cfg := Config{Store: leasestore.New(store), Namespace: testNamespace, Tokens: testTokens(t), Log: zerolog.New(&syncWriter{w: &log}).Level(zerolog.DebugLevel)}
	if edit != nil {
		edit(&cfg)
	}
	srv, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(func() {
		srv.Drain()
		hs.Close()
		srv.Close()
	})
	return &testServer{Server: srv, url: hs.URL, log: &log}
}

// syncWriter serialises writes to a buffer shared by the handlers.
type syncWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

// answer is a registry's answer to one request.
type answer struct {
	status int
	header http.Header
	body   []byte
}

// err decodes the answer's error shape, failing the test if it has none.
func (a answer) err(t testing.TB) *api.Error {
	t.Helper()
	var eb api.ErrorBody
	if err := json.Unmarshal(a.body, &eb); err != nil || eb.Error == nil || eb.Error.Code == "" || eb.Error.Message == "" {
		t.Fatalf("answer %d %s is not the registry's error shape", a.status, a.body)
	}
	if eb.Error.Status() != a.status {
		t.Errorf("code %s came with status %d, want %d", eb.Error.Code, a.status, eb.Error.Status())
	}
	return eb.Error
}

// decode decodes a 2xx answer into v.
func (a answer) decode(t testing.TB, v any) {
	t.Helper()
	if a.status/100 != 2 {
		t.Fatalf("answer %d %s, want a success", a.status, a.body)
	}
	if err := json.Unmarshal(a.body, v); err != nil {
		t.Fatalf("answer %s: %v", a.body, err)
	}
}

// request sends method path with token (none if empty), body as JSON (raw
// when it is a string) and the headers given as name, value pairs.
func request(t testing.TB, base, method, path, token string, body any, headers ...string) answer {
	t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, r)
	if err != nil {
		t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

// acquireBody is the seed's acquire of job by worker, with a TTL.
func acquireBody(job, worker string, ttl time.Duration) api.AcquireRequest {
	return api.AcquireRequest{JobID: job, WorkerID: worker, TTLMS: api.MS(ttl), Host: "host-" + worker, PID: 4242}
}

// drainAnswers drains srv once held reports that the long-poll whose
// answer comes on got is in progress, and fails the test unless the
// long-poll (what) is then answered shutting_down at once.
func drainAnswers(t *testing.T, srv *testServer, got <-chan answer, what string, held func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !held() {
		if time.Now().After(deadline) {
			t.Fatalf("the %s never reached the registry", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
	srv.Drain()
	select {
	case a := <-got:
		if e := a.err(t); e.Code != api.CodeShuttingDown {
			t.Errorf("a %s during a drain: %+v, want %s", what, e, api.CodeShuttingDown)
		}
	case <-time.After(10 * time.Second):
		t.Fatalf("a drain did not answer the %s", what)
	}
}

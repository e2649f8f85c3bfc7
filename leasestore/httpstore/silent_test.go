package httpstore_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/faultproxy"
	"github.com/leasectl/leasectl/internal/registrytest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/httpstore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// The runs' timing in TestTwoRegistriesOneSilent, the issue's: --ttl 6s
// --heartbeat 1s --safety 3s.
const (
	silentTTL       = 6 * time.Second
	silentHeartbeat = time.Second
	silentSafety    = 3 * time.Second
	// silentFor is how long the first registry is silent: three safety
	// windows.
	silentFor = 3 * silentSafety
	// newRuns start one after the other while it is silent, the first at
	// once.
	newRuns = 10
	// newRunWithin is how soon a new run's acquire must be granted: the
	// hedge bound (500 ms) and a request, where one that waits on the
	// silent registry takes --safety.
	newRunWithin = time.Second
)

// twoRegistries serves two registries in front of backend, the first
// behind a proxy the test controls, and returns the proxy and a function
// that opens a client of both (the proxied one first), as a new process
// would.
func twoRegistries(t *testing.T, backend leasestore.Store, ns string) (*faultproxy.Proxy, func(*testing.T) *httpstore.Store) {
	t.Helper()
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // the notes of silent registries
	first, second := registrytest.Start(t, backend, ns), registrytest.Start(t, backend, ns)
	proxy, err := faultproxy.Start(strings.TrimPrefix(first.URL, "https://"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	url := "https://" + proxy.Addr() + "," + strings.TrimPrefix(second.URL, "https://")
	ca := filepath.Join(t.TempDir(), "ca.pem")
	var pems []byte
	for _, r := range []*registrytest.Registry{first, second} {
		pem, err := os.ReadFile(r.Certs.CA)
		if err != nil {
			t.Fatal(err)
		}
		pems = append(pems, pem...)
	}
	if err := os.WriteFile(ca, pems, 0o600); err != nil {
		t.Fatal(err)
	}
	return proxy, func(t *testing.T) *httpstore.Store {
		s, err := httpstore.Open(url, ns, httpstore.Options{Token: registrytest.WorkerToken, CAFile: ca})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// holder renews l every heartbeat as the supervisor does: each renewal
// bounded by the last confirmed renewal's send time + safety, the
// deadline moving to its own send time + safety once it is confirmed. It
// reports on lost the first renewal that was not confirmed in time, and
// stops when stop is closed.
func holder(s leasestore.Store, l *leasestore.Lease, granted time.Time, stop <-chan struct{}, lost chan<- error) {
	deadline := granted.Add(silentSafety)
	beat := time.NewTimer(silentHeartbeat)
	defer beat.Stop()
	for {
		select {
		case <-stop:
			return
		case <-beat.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := s.Renew(ctx, l)
		cancel()
		if err != nil {
			lost <- err
			return
		}
		deadline = sent.Add(silentSafety)
		beat.Reset(time.Until(sent.Add(silentHeartbeat)))
	}
}

// TestTwoRegistriesOneSilent puts two registries in front of one store and
// blackholes the first, which every client lists first, for three safety
// windows (a proxy that stops forwarding without closing), while two
// runs renew their leases and new runs acquire one after the other, each
// through a client of its own, as a new process: the holders' renewals
// are all confirmed in time, each new run is granted within newRunWithin,
// and tokens rise.
func TestTwoRegistriesOneSilent(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "silent")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	proxy, open := twoRegistries(t, backend, "silent")
	acquire := func(s leasestore.Store, job, worker string) (*leasestore.Lease, time.Time) {
		t.Helper()
		sent := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), silentSafety)
		defer cancel()
		req := storetest.Request(job, worker, silentTTL)
		l, err := s.Acquire(ctx, req)
		if err != nil {
			t.Fatalf("acquire %s by %s: %v", job, worker, err)
		}
		return l, sent
	}

	stop, lost := make(chan struct{}), make(chan error, 2)
	var wg sync.WaitGroup
	var holders []*leasestore.Lease
	last := int64(0)
	for _, job := range []string{"held1", "held2"} {
		s := open(t)
		l, sent := acquire(s, job, "holder-"+job)
		last = max(last, l.Token)
		holders = append(holders, l)
		wg.Go(func() { holder(s, l, sent, stop, lost) })
	}
	t.Cleanup(func() {
		close(stop)
		wg.Wait()
	})

	silenced := time.Now()
	proxy.Set(faultproxy.DropBoth)
	pace := time.NewTicker(silentFor / newRuns)
	defer pace.Stop()
	var slowest time.Duration
	for n := 1; n <= newRuns; n++ {
		if n > 1 {
			select {
			case <-pace.C:
			case err := <-lost:
				t.Fatalf("a holder's renewal was not confirmed within --safety while a registry was silent: %v", err)
			}
		}
		s := open(t)
		l, sent := acquire(s, "next", fmt.Sprintf("runner-%d", n)) // a worker ID is unique per run
		took := time.Since(sent)
		slowest = max(slowest, took)
		if took > newRunWithin {
			t.Errorf("run %d, %s into the silence, was granted after %s, want within %s",
				n, sent.Sub(silenced).Round(time.Millisecond), took.Round(time.Millisecond), newRunWithin)
		}
		if l.Token <= last {
			t.Errorf("run %d got token %d, want above %d", n, l.Token, last)
		}
		last = l.Token
		ctx, cancel := context.WithTimeout(t.Context(), silentSafety)
		err := s.Release(ctx, l, leasestore.Outcome{Result: leasestore.ResultCompleted})
		cancel()
		if err != nil {
			t.Fatalf("release of run %d: %v", n, err)
		}
	}
	select {
	case <-pace.C:
	case err := <-lost:
		t.Fatalf("a holder's renewal was not confirmed within --safety while a registry was silent: %v", err)
	}
	t.Logf("%d runs granted while a registry was silent for %s; the slowest in %s",
		newRuns, time.Since(silenced).Round(time.Millisecond), slowest.Round(time.Millisecond))
	for _, l := range holders {
		if st := storetest.Status(t, backend, l.Job); st.State != leasestore.StateRunning || st.Holder == nil || st.Holder.Token != l.Token {
			t.Errorf("%s after the silence: %s %+v, want still held with token %d", l.Job, st.State, st.Holder, l.Token)
		}
	}
}

// TestLateCopyOfAnAcquireGrantsNothing drops the first registry's answers:
// the acquire is granted there, unheard, and its copy sent to the second
// registry past the hedge bound gets the same lease. Once the run has
// released it, a copy of that acquire that lands late (here: the store
// asked again as the first registry would, for a request delayed in the
// network before it) must be refused, leaving the job idle, not granted to
// a run nobody runs.
func TestLateCopyOfAnAcquireGrantsNothing(t *testing.T) {
	backend, err := filestore.Open(t.TempDir(), "late")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	proxy, open := twoRegistries(t, backend, "late")
	proxy.Set(faultproxy.DropReplies)
	s := open(t)
	ctx, cancel := context.WithTimeout(t.Context(), silentSafety)
	defer cancel()
	req := storetest.Request("job", "worker-1", silentTTL)
	l, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if st := storetest.Status(t, backend, "job"); st.Attempts != 1 || st.Holder == nil || st.Holder.Token != l.Token {
		t.Fatalf("after the acquire sent twice: %d attempts, holder %+v; want one grant, token %d", st.Attempts, st.Holder, l.Token)
	}
	if err := s.Release(ctx, l, leasestore.Outcome{Result: leasestore.ResultCompleted}); err != nil {
		t.Fatal(err)
	}
	if late, err := backend.Acquire(ctx, req); err == nil {
		t.Errorf("a late copy of the acquire was granted token %d after the run released its lease", late.Token)
	}
	if st := storetest.Status(t, backend, "job"); st.State != leasestore.StateIdle {
		t.Errorf("after the late copy the job is %s (holder %+v), want IDLE", st.State, st.Holder)
	}
}

package httpstore_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/faultproxy"
	"github.com/leasectl/leasectl/internal/registrytest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/httpstore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// twoRegistries serves two registries in front of an embedded store of
// namespace ns, the first behind a proxy the test controls, and returns the
// store, the proxy and a function that opens a client of both (the proxied
// one first), as a new process would.
func twoRegistries(t *testing.T, ns string) (leasestore.Driver, *faultproxy.Proxy, func(*testing.T) *httpstore.Store) {
	t.Helper()
	backend, err := filestore.Open(t.TempDir(), ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	t.Setenv("XDG_STATE_HOME", t.TempDir()) // the notes of silent registries
	first, second := registrytest.Start(t, leasestore.New(backend), ns), registrytest.Start(t, leasestore.New(backend), ns)
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
	return backend, proxy, func(t *testing.T) *httpstore.Store {
		s, err := httpstore.Open(url, ns, httpstore.Options{Token: registrytest.WorkerToken, CAFile: ca})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

// TestTwoRegistriesOneSilent puts two registries in front of one store and
// blackholes the first, which every client lists first (a proxy that stops
// forwarding without closing): runs ride it out (storetest.RideOutSilence).
func TestTwoRegistriesOneSilent(t *testing.T) {
	_, proxy, open := twoRegistries(t, "silent")
	storetest.RideOutSilence(t, func(t *testing.T) leasestore.Driver { return open(t) }, func() { proxy.Set(faultproxy.DropBoth) })
}

// TestLateCopyOfAnAcquireGrantsNothing drops the first registry's answers:
// the acquire is granted there, unheard, and its copy sent to the second
// registry past the hedge bound gets the same lease. Once the run has
// released it, a copy of that acquire that lands late (here: the store
// asked again as the first registry would, for a request delayed in the
// network before it) must be refused, leaving the job idle, not granted to
// a run nobody runs.
func TestLateCopyOfAnAcquireGrantsNothing(t *testing.T) {
	backend, proxy, open := twoRegistries(t, "late")
	proxy.Set(faultproxy.DropReplies)
	s := open(t)
	ctx, cancel := context.WithTimeout(t.Context(), storetest.SilenceSafety)
	defer cancel()
	req := storetest.Request("job", "worker-1", storetest.SilenceTTL)
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

// TestWaiterHeldThroughCopiesGetsTheJobLater: an acquire copied to two
// registries and refused because another holds the job must not give up
// its holder, which a --wait run asks again under.
func TestWaiterHeldThroughCopiesGetsTheJobLater(t *testing.T) {
	backend, proxy, open := twoRegistries(t, "waiter")
	other := storetest.Acquire(t, backend, storetest.Request("job", "other", storetest.SilenceTTL))
	proxy.Set(faultproxy.DropReplies)
	s := open(t)
	ctx, cancel := context.WithTimeout(t.Context(), storetest.SilenceSafety)
	defer cancel()
	req := storetest.Request("job", "waiter", storetest.SilenceTTL)
	var held *leasestore.HeldError
	if _, err := s.Acquire(ctx, req); !errors.As(err, &held) {
		t.Fatalf("acquire of a held job = %v, want *HeldError", err)
	}
	storetest.Release(t, backend, other, leasestore.ResultCompleted)
	if _, err := s.Acquire(ctx, req); err != nil {
		t.Errorf("the waiter's next attempt, once the job is free: %v, want the lease", err)
	}
}

package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/faultproxy"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// slotRequest is a request for a job of slots slots.
func slotRequest(job, worker string, slots int, wait bool) leasestore.AcquireRequest {
	req := storetest.Request(job, worker, storetest.LongTTL)
	req.Slots, req.Wait = slots, wait
	return req
}

// keysOf lists the keys of namespace ns on s's etcd, without the namespace.
func keysOf(t *testing.T, s *Store) []string {
	t.Helper()
	var resp rangeResponse
	p := []byte(s.ns + "#")
	req := &rangeRequest{Key: p, RangeEnd: []byte(s.ns + "$"), KeysOnly: true}
	if err := s.c.call(t.Context(), "/v3/kv/range", req, &resp); err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.KVs {
		keys = append(keys, strings.TrimPrefix(string(kv.Key), s.ns+"#"))
	}
	return keys
}

// TestEtcdSlotLayout: a job of one slot has the keys a store of one run per
// job always wrote, and the runs of slots 1 and up keys of their own with
// the slot's suffix, on etcd leases of their own; the record keeps the
// job's slots and each slot's etcd leases.
func TestEtcdSlotLayout(t *testing.T) {
	c := testEtcd.Get(t)
	s := openEtcd(t, c.URL(), freshNamespace())
	storetest.Acquire(t, s, slotRequest("one", "w1", 1, false))
	a := storetest.Acquire(t, s, slotRequest("three", "a", 3, false))
	b := storetest.Acquire(t, s, slotRequest("three", "b", 3, false))
	want := []string{"ev/one", "ev/three", "ev/three#1", "job/one", "job/three", "live/one", "live/three", "live/three#1"}
	if got := keysOf(t, s); !slices.Equal(got, want) {
		t.Fatalf("keys %v, want %v", got, want)
	}
	states, err := s.read(t.Context(), "test", "three")
	if err != nil {
		t.Fatal(err)
	}
	st := states[0]
	var doc map[string]json.RawMessage
	if err := json.Unmarshal(st.doc.Value, &doc); err != nil {
		t.Fatal(err)
	}
	if string(doc["slots"]) != "3" || doc["slot_leases"] == nil || doc["runs"] != nil {
		t.Errorf("record %s: want slots 3, the leases of slot 1, and no runs (they are the keys)", st.doc.Value)
	}
	zero, one := st.slot(0), st.slot(1)
	if zero.liveToken != a.Token || one.liveToken != b.Token || zero.live.Lease == one.live.Lease || zero.ev.Lease == one.ev.Lease {
		t.Errorf("slot 0 carries token %d on lease %x, slot 1 token %d on lease %x: want a's and b's tokens on leases of their own",
			zero.liveToken, zero.live.Lease, one.liveToken, one.live.Lease)
	}
	storetest.Release(t, s, b, leasestore.ResultCompleted)
	// Slot 1's next run takes over its etcd leases, never slot 0's.
	d := storetest.Acquire(t, s, slotRequest("three", "d", 3, false))
	states, err = s.read(t.Context(), "test", "three")
	if err != nil {
		t.Fatal(err)
	}
	if got := states[0].slot(1); d.Slot != 1 || got.live.Lease != one.live.Lease || got.live.Lease == zero.live.Lease {
		t.Errorf("d in slot %d on lease %x, want slot 1 on its previous lease %x", d.Slot, got.live.Lease, one.live.Lease)
	}
}

// TestEtcdSlotsRace: clients asking for a job of three slots at once, over
// and over, get at most three runs at a time, each in a slot of its own,
// and tokens that rise with every grant: the guards of the grants'
// transactions, not the clients, decide. On a cluster of three members,
// each client talks to a member of its own.
func TestEtcdSlotsRace(t *testing.T) {
	t.Run("one member", func(t *testing.T) {
		c := testEtcd.Get(t)
		slotsRace(t, func(int) string { return c.URL() })
	})
	t.Run("three members", func(t *testing.T) {
		c := cluster3(t)
		slotsRace(t, func(i int) string { return endpoints(c.Members[i%len(c.Members)]) })
	})
}

// slotsRace is TestEtcdSlotsRace with client i's store at url(i).
func slotsRace(t *testing.T, url func(i int) string) {
	ns := freshNamespace()
	const slots, clients, rounds = 3, 8, 5
	stores := make([]*Store, clients)
	for i := range stores {
		stores[i] = openEtcd(t, url(i), ns)
	}
	var last int64
	for round := range rounds {
		leases := make([]*leasestore.Lease, clients)
		errs := make([]error, clients)
		var wg sync.WaitGroup
		for i, s := range stores {
			wg.Go(func() {
				leases[i], errs[i] = s.Acquire(storetest.Ctx(t), slotRequest("job", fmt.Sprintf("w%d.%d", i, round), slots, false))
			})
		}
		wg.Wait()
		var granted []*leasestore.Lease
		for i, err := range errs {
			switch {
			case err == nil:
				granted = append(granted, leases[i])
			case !errors.As(err, new(*leasestore.HeldError)):
				t.Fatalf("round %d: client %d: %v, want a grant or *HeldError", round, i, err)
			}
		}
		if len(granted) != slots {
			t.Fatalf("round %d: %d grants, want %d", round, len(granted), slots)
		}
		slices.SortFunc(granted, func(a, b *leasestore.Lease) int { return int(a.Token - b.Token) })
		var inUse []int
		for _, l := range granted {
			if l.Token <= last {
				t.Errorf("round %d: token %d after %d", round, l.Token, last)
			}
			last = l.Token
			inUse = append(inUse, l.Slot)
		}
		if slices.Sort(inUse); !slices.Equal(inUse, []int{0, 1, 2}) {
			t.Errorf("round %d: slots %v, want 0, 1, 2", round, inUse)
		}
		for _, l := range granted {
			storetest.Release(t, stores[0], l, leasestore.ResultCompleted)
		}
	}
}

// TestEtcdWaiterLeavingWakesTheNext: a waiter that leaves the queue while
// a slot is free, promised to it, deletes no key; the next waiter is woken
// all the same, by the record's count of wake-ups.
func TestEtcdWaiterLeavingWakesTheNext(t *testing.T) {
	c := testEtcd.Get(t)
	ns := freshNamespace()
	s := openEtcd(t, c.URL(), ns)
	a := storetest.Acquire(t, s, slotRequest("job", "a", 1, true))
	for _, w := range []string{"b", "c"} {
		if _, err := s.Acquire(storetest.Ctx(t), slotRequest("job", w, 1, true)); !errors.As(err, new(*leasestore.HeldError)) {
			t.Fatalf("%s: %v, want *HeldError", w, err)
		}
	}
	storetest.Release(t, s, a, leasestore.ResultCompleted)
	// Subscribed after the release: only what follows wakes it.
	sub, err := openEtcd(t, c.URL(), ns).Subscribe(storetest.Ctx(t), "job", "")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	if err := s.Leave(storetest.Ctx(t), "job", "b"); err != nil {
		t.Fatal(err)
	}
	select {
	case <-sub.Released():
	case <-time.After(storetest.HangGuard):
		t.Fatalf("b leaving while the free slot was its woke no waiter within %s", storetest.HangGuard)
	}
	storetest.Acquire(t, s, slotRequest("job", "c", 1, true))
}

// TestEtcdScanSplitsBySize: a scan that counts the crashes of 40 jobs of
// three slots each, more compares and deletions than etcd's --max-txn-ops
// lets one transaction hold, counts every one of them, in transactions
// that fit.
func TestEtcdScanSplitsBySize(t *testing.T) {
	c := testEtcd.Get(t)
	s := openEtcd(t, c.URL(), freshNamespace())
	const jobs, slots = batchJobs, 3
	var last *leasestore.Lease
	for j := range jobs {
		for w := range slots {
			req := slotRequest(fmt.Sprintf("job%d", j), fmt.Sprintf("w%d.%d", j, w), slots, false)
			req.TTL = minTTL
			last = storetest.Acquire(t, s, req)
		}
	}
	// The last run's lease was the last granted: once it expired, so had
	// every other.
	for guard := time.Now().Add(storetest.HangGuard); len(storetest.Status(t, s, last.Job).Holders) > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatalf("the runs of %s still live after %s", last.Job, storetest.HangGuard)
		}
	}
	crashes, err := s.Scan(storetest.Ctx(t))
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	if len(crashes) != jobs*slots {
		t.Fatalf("scan counted %d crashes, want %d", len(crashes), jobs*slots)
	}
}

// TestEtcdSubscribeMovesOnFromASilentMember: a member that swallows the
// watch request and keeps the connection open (a partition) does not hold
// Subscribe: past watchConfirmBound the stream goes to the next member,
// whose watch wakes the waiter; with no other member, Subscribe fails
// instead of waiting for ever, so the waiter still asks, and still hears
// its signals.
func TestEtcdSubscribeMovesOnFromASilentMember(t *testing.T) {
	c := testEtcd.Get(t)
	p, err := faultproxy.Start(c.Endpoints())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	p.Set(faultproxy.DropBoth)
	ns := freshNamespace()
	s := openEtcd(t, c.URL(), ns)
	a := storetest.Acquire(t, s, slotRequest("job", "a", 1, false))

	sub, err := openEtcd(t, "etcd://"+p.Addr()+","+c.Endpoints(), ns).Subscribe(storetest.Ctx(t), "job", "")
	if err != nil {
		t.Fatalf("Subscribe with the first member silent: %v", err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	storetest.Release(t, s, a, leasestore.ResultCompleted)
	select {
	case <-sub.Released():
	case <-time.After(storetest.HangGuard):
		t.Fatalf("the release woke no waiter within %s", storetest.HangGuard)
	}

	done := make(chan error, 1)
	go func() {
		sub, err := openEtcd(t, "etcd://"+p.Addr(), ns).Subscribe(context.Background(), "job", "")
		if err == nil {
			sub.Close()
		}
		done <- err
	}()
	select {
	case err := <-done:
		storetest.WantUnavailable(t, err, "did not confirm the watch")
	case <-time.After(storetest.HangGuard):
		t.Fatalf("Subscribe to a silent member alone still waits after %s", storetest.HangGuard)
	}
}

package etcdstore

import (
	"errors"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// TestEtcdWaitingWritesNothing: the store keeps no queue of waiters (it is
// no leasestore.Queuer), so a refused request that waits is answered as one
// that does not, and writes nothing: waiters race on every release, as they
// always did.
func TestEtcdWaitingWritesNothing(t *testing.T) {
	if _, ok := any(&Store{}).(leasestore.Queuer); ok {
		t.Fatal("the etcd store is a leasestore.Queuer; it keeps no queue")
	}
	c := testEtcd.Get(t)
	s := openEtcd(t, c.URL(), freshNamespace())
	storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL))
	recordRevision := func() int64 {
		t.Helper()
		states, err := s.read(t.Context(), "test", "job")
		if err != nil || states[0].doc == nil {
			t.Fatalf("reading the job's record: %v", err)
		}
		return states[0].doc.ModRevision
	}
	before := recordRevision()
	req := storetest.Request("job", "w2", storetest.LongTTL)
	req.Wait = true
	_, err := s.Acquire(storetest.Ctx(t), req)
	var held *leasestore.HeldError
	if !errors.As(err, &held) {
		t.Fatalf("a waiting request for a held job: %v, want *HeldError", err)
	}
	if held.Position != 0 || held.Waiting != 0 {
		t.Errorf("the refusal gives position %d of %d waiting, want no queue", held.Position, held.Waiting)
	}
	if got := recordRevision(); got != before {
		t.Errorf("the waiting request wrote the job's record: revision %d, want %d", got, before)
	}
	if st := storetest.Status(t, s, "job"); len(st.Queue) != 0 {
		t.Errorf("status shows a queue %+v, want none", st.Queue)
	}
}

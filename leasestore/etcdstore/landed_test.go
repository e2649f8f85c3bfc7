package etcdstore

import (
	"testing"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// TestEtcdTransactionFindsItsOwnCommittedCopy: a copy of a transaction
// whose compare fails because another copy of it committed (the client
// hedges requests over members) counts as committed; a different write
// on the same stale state is still refused.
func TestEtcdTransactionFindsItsOwnCommittedCopy(t *testing.T) {
	c := testEtcd.Get(t)
	s := openEtcd(t, c.URL(), freshNamespace())
	ctx := call(t, storetest.HangGuard)
	transaction := func(st *jobState, reason string) []requestOp {
		t.Helper()
		at := now()
		rec := st.asRecord(at)
		ops, _, err := s.writes(st, rec, rules.Quarantine(rec, leasestore.Note{By: "alice", Reason: reason}, at), at)
		if err != nil {
			t.Fatal(err)
		}
		return ops
	}
	states, err := s.read(ctx, "test", "job")
	if err != nil {
		t.Fatal(err)
	}
	stale := *states[0]
	stale.rec = &record{}
	ops := transaction(states[0], "first")
	for copyN := 1; copyN <= 2; copyN++ {
		ok, _, err := s.commit(ctx, "test", []*jobState{&stale}, ops)
		if err != nil || !ok {
			t.Fatalf("copy %d of the transaction: ok %v, %v; want committed", copyN, ok, err)
		}
	}
	if ok, fresh, err := s.commit(ctx, "test", []*jobState{&stale}, transaction(&stale, "second")); err != nil || ok || len(fresh) != 1 {
		t.Fatalf("another write on the stale state: ok %v, %v; want refused with the fresh state", ok, err)
	}
}

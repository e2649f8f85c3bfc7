package outbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// down is a store that fails every RecordLate, as one cut off does.
type down struct{}

func (down) RecordLate(context.Context, leasestore.LateOutcome) (leasestore.Correction, error) {
	return leasestore.Correction{}, &leasestore.UnavailableError{Op: "record late outcome", Err: errors.New("i/o timeout")}
}

// forbidden is a store that refuses every RecordLate to the caller's role,
// as a registry does a token without the worker role.
type forbidden struct{}

func (forbidden) RecordLate(context.Context, leasestore.LateOutcome) (leasestore.Correction, error) {
	return leasestore.Correction{}, fmt.Errorf("registry refused the request: %w", leasestore.ErrForbidden)
}

func TestPutKeepsUntilDelivered(t *testing.T) {
	state := t.TempDir()
	store, err := filestore.Open(t.TempDir(), "ns")
	if err != nil {
		t.Fatal(err)
	}
	// A run cut off past its TTL: its crash is counted before its outcome
	// can be recorded.
	l := storetest.CrashRun(t, store, "job", "w1", 3)
	if _, err := store.Scan(storetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	box := Open(state, "file:///somewhere", "ns")
	if box.Pending() {
		t.Fatal("a new outbox has outcomes pending")
	}
	late := leasestore.LateOutcome{Job: "job", Holder: "w1", Token: l.Token, Outcome: storetest.Outcome(leasestore.ResultFailed)}
	if err := box.Put(late); err != nil {
		t.Fatalf("Put: %v", err)
	}
	if err := box.Put(late); err != nil { // the same run again: still one
		t.Fatalf("Put again: %v", err)
	}
	if other := Open(state, "file:///elsewhere", "ns"); other.Pending() {
		t.Error("another store's outbox has this one's outcome")
	}
	if fi, err := os.Stat(box.Dir()); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("outbox folder %v, %v; want mode 0700", fi, err)
	}

	if err := box.Deliver(storetest.Ctx(t), down{}, zerolog.Nop()); !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("Deliver to a store that is down = %v, want ErrUnavailable", err)
	}
	if !box.Pending() {
		t.Fatal("an outcome the store did not take was dropped")
	}
	// A caller whose role may not record it leaves it for one who may.
	if err := box.Deliver(storetest.Ctx(t), forbidden{}, zerolog.Nop()); !errors.Is(err, leasestore.ErrForbidden) {
		t.Fatalf("Deliver with a role the store refuses = %v, want ErrForbidden", err)
	}
	if !box.Pending() {
		t.Fatal("an outcome refused to the caller's role was dropped")
	}
	if err := box.Deliver(storetest.Ctx(t), store, zerolog.Nop()); err != nil {
		t.Fatalf("Deliver: %v", err)
	}
	if box.Pending() {
		t.Error("a delivered outcome is still pending")
	}
	if st := storetest.Status(t, store, "job"); st.Crashes != 0 || st.LastOutcome == nil || st.LastOutcome.Token != l.Token {
		t.Errorf("after delivery: %d crashes, last outcome %+v; want the crash withdrawn and the run's outcome", st.Crashes, st.LastOutcome)
	}
}

func TestOpenKeepsNoPassword(t *testing.T) {
	a := Open("/state", "redis://user:secret@host:6379/0", "ns")
	b := Open("/state", "redis://user:other@host:6379/0", "ns")
	if a.Dir() != b.Dir() {
		t.Errorf("outboxes of one store differ by password: %s, %s", a.Dir(), b.Dir())
	}
}

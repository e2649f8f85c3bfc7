package storetest

import (
	"errors"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
)

// testStop holds a store to Stop (docs/semantics.md, Stop): the holder
// learns the request from its next renewal, the job stays held until the
// run is released, that release counts no crash, and the next grant starts
// without the request.
func testStop(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	note := leasestore.Note{By: "alice", Reason: "bad deploy"}
	if err := s.Stop(Ctx(t), "job", note); !errors.Is(err, leasestore.ErrNotRunning) {
		t.Errorf("Stop of a job the store never saw = %v, want ErrNotRunning", err)
	}
	l := Acquire(t, s, Request("job", "w1", LongTTL))
	if err := s.Renew(Ctx(t), l); err != nil || l.Stop != nil {
		t.Fatalf("Renew before any stop = %v with stop %+v, want nil and none", err, l.Stop)
	}
	if err := s.Stop(Ctx(t), "job", note); err != nil {
		t.Fatalf("Stop of a running job: %v", err)
	}
	st := Status(t, s, "job")
	if st.State != leasestore.StateRunning || st.Holder == nil || st.Holder.Stop == nil || st.Holder.Stop.By != note.By || st.Holder.Stop.Reason != note.Reason {
		t.Errorf("status %s with holder %+v, want %s with the stop request", st.State, st.Holder, leasestore.StateRunning)
	}
	leases, err := s.Leases(Ctx(t))
	if err != nil || len(leases) != 1 || leases[0].Stop == nil || leases[0].Stop.By != note.By || leases[0].Stop.Reason != note.Reason {
		t.Errorf("Leases() = %+v, %v; want the one lease with the stop request", leases, err)
	}
	if e := lastEvent(t, st); e.Kind != leasestore.EventStop || e.Worker != note.By || e.Token != l.Token {
		t.Errorf("last event %+v, want %s by %s of token %d", e, leasestore.EventStop, note.By, l.Token)
	}
	if err := s.Renew(Ctx(t), l); err != nil || l.Stop == nil || l.Stop.By != note.By || l.Stop.Reason != note.Reason || l.Stop.At.IsZero() {
		t.Fatalf("Renew after Stop = %v with stop %+v, want the request", err, l.Stop)
	}
	_, err = s.Acquire(Ctx(t), Request("job", "w2", LongTTL))
	errorAs[*leasestore.HeldError](t, err)

	out := Outcome(leasestore.ResultFailed)
	out.Signal, out.ExitCode, out.Reason = 15, -1, l.Stop.Detail()
	if err := s.Release(Ctx(t), l, out); err != nil {
		t.Fatalf("Release of the stopped run: %v", err)
	}
	st = Status(t, s, "job")
	if st.Crashes != 0 || st.LastOutcome == nil || st.LastOutcome.Reason != "stopped by alice: bad deploy" {
		t.Errorf("after the stopped run: crashes %d, last outcome %+v; want no crash and the stop as its reason", st.Crashes, st.LastOutcome)
	}
	if err := s.Stop(Ctx(t), "job", note); !errors.Is(err, leasestore.ErrNotRunning) {
		t.Errorf("Stop of a released job = %v, want ErrNotRunning", err)
	}
	next := Acquire(t, s, Request("job", "w3", LongTTL))
	if err := s.Renew(Ctx(t), next); err != nil || next.Stop != nil {
		t.Errorf("Renew of the next grant = %v with stop %+v, want nil and none", err, next.Stop)
	}
}

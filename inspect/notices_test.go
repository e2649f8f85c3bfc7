package inspect

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// noticeKinds lists the kind and job of each notice s holds, in order.
func noticeKinds(s *fakeStore) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, n := range s.notices {
		out = append(out, string(n.Kind)+" "+n.Job)
	}
	return out
}

// A reaper that records notices says once that a job fell overdue, and once
// that it is back in time, even when it was restarted in between: it reads
// the store's notices to know what it said.
func TestReaperRecordsOverdueOnceAcrossARestart(t *testing.T) {
	s := newFakeStore(t0)
	expect(t, s, "nightly", time.Hour, 10*time.Minute)
	s.advance(71 * time.Minute)
	pass := func(r *Reaper) {
		t.Helper()
		if _, err := r.Pass(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	first := &Reaper{Store: leasestore.New(s), RecordNotices: true, NoticeFailed: func(err error) { t.Error(err) }}
	pass(first)
	pass(first)
	if got := noticeKinds(s); len(got) != 1 || got[0] != "overdue nightly" {
		t.Fatalf("notices after two passes %q, want nightly overdue once", got)
	}
	due := s.notices[0].Due
	if want := t0.Add(70 * time.Minute); !due.Equal(want) || s.notices[0].Key != leasestore.NoticeKey(leasestore.NoticeOverdue, "nightly", want.UnixMicro()) {
		t.Errorf("overdue notice %+v, want due %s and its key", s.notices[0], want)
	}

	restarted := &Reaper{Store: leasestore.New(s), RecordNotices: true, NoticeFailed: func(err error) { t.Error(err) }}
	complete(t, s, "nightly")
	pass(restarted)
	got := noticeKinds(s)
	if len(got) != 2 || got[1] != "back-in-time nightly" || !s.notices[1].Due.Equal(due) {
		t.Fatalf("notices after the restarted reaper's pass %q (%+v), want nightly back in time from due %s", got, s.notices, due)
	}
	pass(restarted)
	if got := noticeKinds(s); len(got) != 2 {
		t.Errorf("a further pass recorded %q", got[2:])
	}
}

// A notice the store refused is put again at the next pass, and the
// failure does not fail the pass.
func TestReaperKeepsNoticesTheStoreRefused(t *testing.T) {
	s := newFakeStore(t0)
	acquire(t, s, "job", "w1", time.Minute, 3)
	s.advance(2 * time.Minute)
	var failures []error
	r := &Reaper{Store: leasestore.New(s), RecordNotices: true, NoticeFailed: func(err error) { failures = append(failures, err) }}
	refusing := &refusingNotices{fakeStore: s}
	r.Store = leasestore.New(refusing)
	crashes, err := r.Pass(context.Background())
	if err != nil || len(crashes) != 1 || len(failures) == 0 {
		t.Fatalf("pass with the notices refused: %v, %v, failures %v; want the crash, the pass fine, a failure reported", crashes, err, failures)
	}
	r.Store = leasestore.New(s)
	if _, err := r.Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := noticeKinds(s); len(got) != 1 || got[0] != "crash job" {
		t.Errorf("notices after the store took them %q, want the crash", got)
	}
}

// refusingNotices is the fake store refusing to keep notices, as a store
// down for that one call.
type refusingNotices struct{ *fakeStore }

func (r *refusingNotices) PutNotices(context.Context, []leasestore.Notice) error {
	return &leasestore.UnavailableError{Op: "put notices", Err: errors.New("connection refused")}
}

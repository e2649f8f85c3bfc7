package rules

import (
	"errors"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

func notice(key string, recorded time.Time) leasestore.Notice {
	return NewNotice(leasestore.Notice{Key: key, Kind: leasestore.NoticeCrash, Job: "job", At: recorded}, recorded)
}

func TestClaimNotice(t *testing.T) {
	tests := []struct {
		name  string
		setup func(n *leasestore.Notice)
		owner string
		now   time.Time
		ok    bool
	}{
		{"a new notice is due at once", func(*leasestore.Notice) {}, "a", t0, true},
		{"a claim that holds keeps another owner out",
			func(n *leasestore.Notice) { ClaimNotice(n, "a", time.Minute, t0) }, "b", at(59 * time.Second), false},
		{"a claim that holds keeps its own owner out too (one delivery at a time)",
			func(n *leasestore.Notice) { ClaimNotice(n, "a", time.Minute, t0) }, "a", at(time.Second), false},
		{"an expired claim may be claimed by another owner",
			func(n *leasestore.Notice) { ClaimNotice(n, "a", time.Minute, t0) }, "b", at(time.Minute), true},
		{"a notice to retry is not due before its delay",
			func(n *leasestore.Notice) {
				ClaimNotice(n, "a", time.Minute, t0)
				_ = SettleNotice(n, "a", leasestore.Settlement{RetryIn: 10 * time.Second}, at(time.Second))
			}, "b", at(10 * time.Second), false},
		{"a notice to retry is due after its delay, to anyone",
			func(n *leasestore.Notice) {
				ClaimNotice(n, "a", time.Minute, t0)
				_ = SettleNotice(n, "a", leasestore.Settlement{RetryIn: 10 * time.Second}, at(time.Second))
			}, "b", at(11 * time.Second), true},
		{"a sent notice is never claimed again",
			func(n *leasestore.Notice) {
				ClaimNotice(n, "a", time.Minute, t0)
				_ = SettleNotice(n, "a", leasestore.Settlement{Sent: true}, at(time.Second))
			}, "b", at(time.Hour), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := notice("k", t0)
			tt.setup(&n)
			attempts := n.Attempts
			before := n
			if got := ClaimNotice(&n, tt.owner, time.Minute, tt.now); got != tt.ok {
				t.Fatalf("ClaimNotice = %v, want %v", got, tt.ok)
			}
			if !tt.ok {
				if !reflect.DeepEqual(n, before) {
					t.Fatalf("a refused claim changed the notice: %+v -> %+v", before, n)
				}
				return
			}
			if n.Owner != tt.owner || !n.ClaimedUntil.Equal(tt.now.Add(time.Minute)) || n.Attempts != attempts+1 {
				t.Fatalf("claimed notice = owner %q until %s attempts %d; want %q until %s attempts %d",
					n.Owner, n.ClaimedUntil, n.Attempts, tt.owner, tt.now.Add(time.Minute), attempts+1)
			}
		})
	}
}

func TestSettleNotice(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(n *leasestore.Notice)
		owner   string
		s       leasestore.Settlement
		now     time.Time
		err     error
		sent    bool
		nextAt  time.Time
		lastErr string
		sentTo  []string
	}{
		{"the owner settles it as sent", func(n *leasestore.Notice) { ClaimNotice(n, "a", time.Minute, t0) },
			"a", leasestore.Settlement{Sent: true}, at(time.Second), nil, true, t0, "", nil},
		{"the sinks that took it are kept when another did not", func(n *leasestore.Notice) { ClaimNotice(n, "a", time.Minute, t0) },
			"a", leasestore.Settlement{SentTo: []string{"webhook#1"}, RetryIn: 5 * time.Second, Error: "command#2: exit status 3"},
			at(time.Second), nil, false, at(6 * time.Second), "command#2: exit status 3", []string{"webhook#1"}},
		{"a retry adds the sinks that took it then, each once", func(n *leasestore.Notice) {
			ClaimNotice(n, "a", time.Minute, t0)
			_ = SettleNotice(n, "a", leasestore.Settlement{SentTo: []string{"webhook#1"}, RetryIn: time.Second}, at(time.Second))
			ClaimNotice(n, "b", time.Minute, at(2*time.Second))
		}, "b", leasestore.Settlement{Sent: true, SentTo: []string{"command#2", "webhook#1"}}, at(3 * time.Second), nil, true,
			at(2 * time.Second), "", []string{"webhook#1", "command#2"}},
		{"the owner settles it to retry after a delay", func(n *leasestore.Notice) { ClaimNotice(n, "a", time.Minute, t0) },
			"a", leasestore.Settlement{RetryIn: 5 * time.Second, Error: "503"}, at(time.Second), nil, false, at(6 * time.Second), "503", nil},
		{"past its hold, the claim is still the owner's while nobody claimed it since",
			func(n *leasestore.Notice) { ClaimNotice(n, "a", time.Minute, t0) },
			"a", leasestore.Settlement{Sent: true}, at(time.Hour), nil, true, t0, "", nil},
		{"another owner's claim is refused", func(n *leasestore.Notice) {
			ClaimNotice(n, "a", time.Minute, t0)
			ClaimNotice(n, "b", time.Minute, at(time.Minute))
		}, "a", leasestore.Settlement{Sent: true}, at(61 * time.Second), leasestore.ErrNoticeNotHeld, false, t0, "", nil},
		{"an unclaimed notice is refused", func(*leasestore.Notice) {},
			"a", leasestore.Settlement{Sent: true}, at(time.Second), leasestore.ErrNoticeNotHeld, false, t0, "", nil},
		{"a notice sent already is refused", func(n *leasestore.Notice) {
			ClaimNotice(n, "a", time.Minute, t0)
			_ = SettleNotice(n, "a", leasestore.Settlement{Sent: true}, at(time.Second))
			n.Owner = "a"
		}, "a", leasestore.Settlement{RetryIn: time.Second}, at(2 * time.Second), leasestore.ErrNoticeNotHeld, true, t0, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := notice("k", t0)
			tt.setup(&n)
			before := n
			err := SettleNotice(&n, tt.owner, tt.s, tt.now)
			if !errors.Is(err, tt.err) || (err == nil) != (tt.err == nil) {
				t.Fatalf("SettleNotice = %v, want %v", err, tt.err)
			}
			if err != nil {
				if !reflect.DeepEqual(n, before) {
					t.Fatalf("a refused settlement changed the notice: %+v -> %+v", before, n)
				}
				return
			}
			if n.Sent() != tt.sent || !n.NextAt.Equal(tt.nextAt) || n.LastError != tt.lastErr || n.Owner != "" || !slices.Equal(n.SentTo, tt.sentTo) {
				t.Fatalf("settled notice = sent %v next %s error %q owner %q sent to %q; want sent %v next %s error %q owner \"\" sent to %q",
					n.Sent(), n.NextAt, n.LastError, n.Owner, n.SentTo, tt.sent, tt.nextAt, tt.lastErr, tt.sentTo)
			}
		})
	}
}

// ofJob is a new notice of job.
func ofJob(key, job string, recorded time.Time) leasestore.Notice {
	n := notice(key, recorded)
	n.Job = job
	return n
}

func TestPruneNotices(t *testing.T) {
	sent := func(key string, recorded time.Time) leasestore.Notice {
		n := notice(key, recorded)
		n.SentAt = recorded
		return n
	}
	tests := []struct {
		name  string
		list  []leasestore.Notice
		limit int
		drop  []string
	}{
		{"nothing to drop within the retention and the cap",
			[]leasestore.Notice{notice("a", at(5*time.Minute)), sent("b", at(5*time.Minute))}, 2, nil},
		{"past the retention, sent or not, a notice is dropped",
			[]leasestore.Notice{notice("old", t0), sent("old-sent", t0), notice("new", at(time.Hour))}, 10, []string{"old", "old-sent"}},
		{"at the retention exactly it is kept",
			[]leasestore.Notice{notice("edge", at(time.Hour-time.Minute))}, 10, nil},
		{"past the cap the oldest sent go first",
			[]leasestore.Notice{notice("u1", at(10*time.Minute)), sent("s2", at(20*time.Minute)), sent("s1", at(15*time.Minute)), notice("u2", at(30*time.Minute))},
			2, []string{"s1", "s2"}},
		{"past the cap with none sent the oldest unsent go",
			[]leasestore.Notice{notice("u2", at(20*time.Minute)), notice("u1", at(10*time.Minute)), notice("u3", at(30*time.Minute))},
			1, []string{"u1", "u2"}},
		{"a flood of one job's notices does not push out the other jobs' older ones",
			[]leasestore.Notice{ofJob("real-a", "a", at(time.Minute)), ofJob("real-b", "b", at(2*time.Minute)),
				ofJob("f1", "flood", at(10*time.Minute)), ofJob("f2", "flood", at(11*time.Minute)), ofJob("f3", "flood", at(12*time.Minute)),
				ofJob("f4", "flood", at(13*time.Minute)), ofJob("f5", "flood", at(14*time.Minute))},
			4, []string{"f1", "f2", "f3"}},
		{"while sent ones remain, no unsent one goes, however many a job has",
			[]leasestore.Notice{sent("s1", at(30*time.Minute)), ofJob("f1", "flood", at(10*time.Minute)), ofJob("f2", "flood", at(11*time.Minute)),
				ofJob("real", "a", at(time.Minute))},
			3, []string{"s1"}},
		{"of jobs with as many, the oldest goes first",
			[]leasestore.Notice{ofJob("b1", "b", at(2*time.Minute)), ofJob("a1", "a", at(time.Minute)), ofJob("b2", "b", at(4*time.Minute)),
				ofJob("a2", "a", at(3*time.Minute))},
			1, []string{"a1", "b1", "a2"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := PruneNotices(tt.list, at(61*time.Minute), time.Hour, tt.limit)
			if !slices.Equal(got, tt.drop) {
				t.Fatalf("PruneNotices = %q, want %q", got, tt.drop)
			}
		})
	}
}

// A notice as put carries no delivery of its writer's: a put that says it
// was sent, to every sink or to some, is recorded due at once, to all.
func TestNewNoticeTakesNoDeliveryFromItsWriter(t *testing.T) {
	put := leasestore.Notice{Key: "k", Kind: leasestore.NoticeCrash, Job: "job", At: t0, Owner: "w", Attempts: 3,
		LastError: "x", SentTo: []string{"webhook#1"}, SentAt: t0}
	n := NewNotice(put, at(time.Second))
	if n.Sent() || n.SentTo != nil || n.Owner != "" || n.Attempts != 0 || n.LastError != "" || !NoticeDue(&n, at(time.Second)) {
		t.Errorf("NewNotice kept its writer's delivery: %+v", n)
	}
}

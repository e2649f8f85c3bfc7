package etcdstore

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore/storetest"
)

// A lease that expires writes no record: the deletion of its liveness key
// wakes the waiter all the same, once turnGrace passed without a record
// saying whose turn it is (a release, which writes one, wakes only the
// waiters in their turn: storetest's WakeInTurn).
func TestEtcdWaiterWokenByAnExpiry(t *testing.T) {
	s := openEtcd(t, testEtcd.Get(t).URL(), freshNamespace())
	holder := storetest.Request("job", "a", minTTL)
	holder.Wait = true
	storetest.Acquire(t, s, holder)
	sub, err := s.Subscribe(call(t, storetest.HangGuard), "job", "b")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sub.Close() })
	waiter := storetest.Request("job", "b", storetest.LongTTL)
	waiter.Wait = true
	if _, err := s.Acquire(call(t, storetest.HangGuard), waiter); err == nil {
		t.Fatal("b was granted the job a holds")
	}
	asked := time.Now()
	select {
	case <-sub.Released():
		if waited := time.Since(asked); waited < minTTL/2 {
			t.Errorf("b woken %s after it asked, before a's lease of %s could expire", waited, minTTL)
		}
	case <-time.After(5*minTTL + storetest.HangGuard):
		t.Fatal("the expiry of a's lease did not wake b")
	}
	storetest.Acquire(t, s, waiter)
}

// A record whose wake-ups moved wakes the waiters its turn names; one
// written by a leasectl older than the turn names none, and wakes every
// waiter, as that leasectl's waiters expect.
func TestEtcdRecordWakesTheWaitersItsTurnNames(t *testing.T) {
	for _, tc := range []struct {
		name, record string
		woken        bool
	}{
		{"in its turn", `{"wakes":2,"turn":["b"]}`, true},
		{"behind", `{"wakes":2,"turn":["a"]}`, false},
		{"nobody's turn", `{"wakes":2,"turn":[]}`, false},
		{"an older leasectl's", `{"wakes":2}`, true},
		{"no wake-up", `{"wakes":1,"turn":["b"]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := &subscription{waiter: "b", released: make(chan struct{}, 1)}
			w.event(watchEvent{Type: "PUT", KV: keyValue{Value: []byte(tc.record), ModRevision: 7},
				PrevKV: &keyValue{Value: []byte(`{"wakes":1,"turn":["b"]}`)}})
			select {
			case <-w.released:
				if !tc.woken {
					t.Error("woken")
				}
			default:
				if tc.woken {
					t.Error("not woken")
				}
			}
		})
	}
}

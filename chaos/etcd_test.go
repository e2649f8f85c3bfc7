package chaos

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
)

// etcdTiming is the run flags of the etcd mode: etcd's leases last whole
// seconds, at least 2, with 1 s between the safety deadline and
// the expiry, twice the Redis mode's margin, for etcd's elections.
var etcdTiming = timing{ttl: 2 * time.Second, heartbeat: 400 * time.Millisecond, safety: time.Second}

// leaderFaultSpacing is the least time between two leader faults: the TTL,
// an election timeout, etcd's expiry check and a margin.
const leaderFaultSpacing = 5 * time.Second

// newEtcdHarness is newHarness on a 3-member etcd cluster of the test's
// own, with etcdTiming.
func newEtcdHarness(t *testing.T, job string) (*harness, *etcdtest.Cluster) {
	t.Helper()
	c, err := etcdtest.StartCluster(etcdtest.Options{Members: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	h := newHarness(t, job, c.URL())
	h.timing = etcdTiming
	return h, c
}

// leaderFaults are the faults of the etcd mode on c: the leader SIGKILLed
// and restarted after a pause, and the leader frozen for a while (often
// past the holder's safety window and an election timeout).
func leaderFaults(c *etcdtest.Cluster) []fault {
	// Every leader change gives every lease a full TTL again (and an
	// election timeout): leader faults less than leaderFaultSpacing apart
	// would keep a dead holder's lease alive for ever, and the run would
	// show nothing but waiting.
	spaced := &spacing{least: leaderFaultSpacing}
	leader := func() *etcdtest.Member {
		if !spaced.due() {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		m, err := c.Leader(ctx)
		if err != nil {
			return nil
		}
		return m
	}
	return []fault{
		{"kill-leader", func(_ *harness, rng *rand.Rand) (bool, error) {
			m := leader()
			if m == nil {
				return false, nil
			}
			if err := m.Kill(); err != nil {
				return false, err
			}
			time.Sleep(pause(rng, 200*time.Millisecond, 800*time.Millisecond))
			return true, m.Restart()
		}},
		{"freeze-leader", func(_ *harness, rng *rand.Rand) (bool, error) {
			m := leader()
			if m == nil {
				return false, nil
			}
			if err := m.Freeze(); err != nil {
				return false, err
			}
			time.Sleep(pause(rng, 300*time.Millisecond, 1500*time.Millisecond))
			return true, m.Thaw()
		}},
	}
}

// TestChaosEtcd: the workers loop on a 3-member etcd cluster while
// supervisors are SIGKILLed and SIGSTOPped, children and waiters SIGKILLed,
// and the leader SIGKILLed (then restarted) or frozen. No two children may
// ever be alive at once, and tokens rise with every holder.
//
// etcd's leases are twice as long as the Redis mode's and leader faults
// come at most every leaderFaultSpacing: the run lasts at least 30 s to
// see enough holders.
func TestChaosEtcd(t *testing.T) {
	h, c := newEtcdHarness(t, "chaos-etcd")
	h.chaos(max(duration(t), 30*time.Second), append([]fault{killSupervisor, stopSupervisor, killChild, killChild, killWaiter}, leaderFaults(c)...), exactCrashes)
}

package chaos

import (
	"context"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/internal/faultproxy"
)

// etcdTiming is the run flags of the etcd mode: etcd's leases last whole
// seconds, at least 2, with 1 s between the safety deadline and
// the expiry, twice the Redis mode's margin, for etcd's elections.
var etcdTiming = timing{ttl: 2 * time.Second, heartbeat: 400 * time.Millisecond, safety: time.Second}

// leaderFaultSpacing is the least time between two leader faults: the TTL,
// an election timeout, etcd's expiry check and a margin.
const leaderFaultSpacing = 5 * time.Second

// newEtcdHarness is newHarness on a 3-member etcd cluster of the test's
// own, with etcdTiming. The runs reach the first member through a proxy of
// the test's own, listed first, which blackholeMember silences.
func newEtcdHarness(t *testing.T, job string) (*harness, *etcdtest.Cluster, *faultproxy.Proxy) {
	t.Helper()
	c, err := etcdtest.StartCluster(etcdtest.Options{Members: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	hosts := strings.Split(c.Endpoints(), ",")
	p, err := faultproxy.Start(hosts[0])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	h := newHarness(t, job, "etcd://"+p.Addr()+","+strings.Join(hosts[1:], ","))
	h.timing = etcdTiming
	return h, c, p
}

// silentFor draws how long a silent-member fault lasts: up to three of the
// runs' safety windows, so that a renewal that waited on the silent member
// would cost its run its lease many times over.
func silentFor(rng *rand.Rand) time.Duration {
	return pause(rng, 300*time.Millisecond, 3*etcdTiming.safety)
}

// silentMemberFaults are the faults of a member that goes silent without a
// word: one frozen (SIGSTOP) that is not the leader (freeze-leader is
// leaderFaults'), and the proxied member blackholed (p forwards nothing and
// closes nothing). Either leaves a quorum: no run may lose its lease for
// it, and new runs go to the next member within the hedge bound.
func silentMemberFaults(c *etcdtest.Cluster, p *faultproxy.Proxy) []fault {
	return []fault{
		{"freeze-follower", func(_ *harness, rng *rand.Rand) (bool, error) {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			l, err := c.Leader(ctx)
			if err != nil {
				return false, nil
			}
			var followers []*etcdtest.Member
			for _, m := range c.Members {
				if m != l && m.Running() {
					followers = append(followers, m)
				}
			}
			if len(followers) == 0 {
				return false, nil
			}
			m := followers[rng.IntN(len(followers))]
			if err := m.Freeze(); err != nil {
				return false, err
			}
			time.Sleep(silentFor(rng))
			return true, m.Thaw()
		}},
		{"blackhole-member", func(_ *harness, rng *rand.Rand) (bool, error) {
			p.Set(faultproxy.DropBoth)
			time.Sleep(silentFor(rng))
			p.Set(faultproxy.Pass)
			return true, nil
		}},
	}
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
// the leader SIGKILLed (then restarted) or frozen, and a member silent
// (a follower frozen, or the member the runs list first blackholed) for up
// to three safety windows. No two children may ever be alive at once,
// tokens rise with every holder, and no run whose worker did not die is
// counted as a crash.
//
// etcd's leases are twice as long as the Redis mode's and leader faults
// come at most every leaderFaultSpacing: the run lasts at least 30 s to
// see enough holders.
func TestChaosEtcd(t *testing.T) {
	h, c, p := newEtcdHarness(t, "chaos-etcd")
	faults := append([]fault{killSupervisor, stopSupervisor, killChild, killChild, killWaiter}, leaderFaults(c)...)
	h.chaos(max(duration(t), 30*time.Second), append(faults, silentMemberFaults(c, p)...), exactCrashes)
}

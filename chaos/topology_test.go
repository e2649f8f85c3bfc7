package chaos

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
)

// Chaos on the Redis deployments that survive a node loss: a primary with
// replicas under Sentinel, and a Redis Cluster whose primaries have
// replicas. Failovers are among the faults. With min_replicas=1 every grant
// and renewal is on a replica before it counts, so a failover cannot hand
// the job to a second worker: no overlap is allowed. Without it, Redis's
// asynchronous replication can lose a grant; those runs report how often
// children overlapped, and still require tokens to rise (the clock floor).

// failoverTimeout bounds a failover: detection (down-after 1 s, or the
// cluster's node timeout) plus the election. A Sentinel election that ends
// in a split vote is tried again only after twice the failover-timeout (5 s
// in the tests' Sentinels), and on a loaded 2-core machine one in a few
// runs needed more than two tries: 60 s leaves room for five.
const failoverTimeout = 60 * time.Second

// awaitPrimary polls primary until it names a server other than old that
// answers role:master.
func awaitPrimary(old *redistest.Server, primary func() (*redistest.Server, error)) (*redistest.Server, error) {
	deadline := time.Now().Add(failoverTimeout)
	for {
		p, err := primary()
		if err == nil && p != old {
			if info, err := p.Do("INFO", "replication"); err == nil && strings.Contains(info, "role:master") {
				return p, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, fmt.Errorf("no new primary %s after killing %s (last: %v)", failoverTimeout, old.Addr, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sentinelFaults are the faults of a Sentinel deployment: its primary
// SIGKILLed (a failover, then the old primary restarted empty, to rejoin as
// a replica) and frozen for up to 2 s (past the 1 s down-after, so a
// failover may start while it is frozen, and it wakes up a stale primary),
// and a Sentinel or a replica frozen.
// Each fault ends once the deployment is whole again, a primary with every
// replica in sync: faults on a deployment that never recovers would test
// Sentinel's limits (it promotes no replica it lost touch with), not
// leasectl.
func sentinelFaults(topo *redistest.Sentinel, replicas int) []fault {
	kill := fault{"kill-primary", func(*harness, *rand.Rand) (bool, error) {
		old, err := topo.Primary()
		if err != nil {
			return false, err
		}
		if err := old.Kill(); err != nil {
			return false, err
		}
		if _, err := awaitPrimary(old, topo.Primary); err != nil {
			return false, err
		}
		if err := old.Restart(); err != nil {
			return false, err
		}
		return true, awaitWhole(topo.Primary, replicas)
	}}
	freeze := fault{"freeze-primary", func(_ *harness, rng *rand.Rand) (bool, error) {
		p, err := topo.Primary()
		if err != nil {
			return false, err
		}
		if err := p.Freeze(); err != nil {
			return false, err
		}
		time.Sleep(pause(rng, 300*time.Millisecond, 2*time.Second))
		if err := p.Thaw(); err != nil {
			return false, err
		}
		return true, awaitWhole(topo.Primary, replicas)
	}}
	// A Sentinel or a replica frozen for up to three of the runs' safety
	// windows: the runs never talk to a replica, and ask the Sentinels
	// for the primary only as they dial, the silent one bounded by the
	// dial timeout (leasestore/redisstore/url.go).
	silent := fault{"freeze-sentinel-or-replica", func(_ *harness, rng *rand.Rand) (bool, error) {
		nodes := topo.Sentinels()
		data, err := topo.Replicas()
		if err != nil {
			return false, err
		}
		nodes = append(nodes, data...)
		n := nodes[rng.IntN(len(nodes))]
		if err := n.Freeze(); err != nil {
			return false, err
		}
		time.Sleep(pause(rng, 300*time.Millisecond, 3*safety))
		if err := n.Thaw(); err != nil {
			return false, err
		}
		return true, awaitWhole(topo.Primary, replicas)
	}}
	return []fault{kill, freeze, silent}
}

// awaitWhole waits until primary names a server that answers role:master
// with the given number of replicas online.
func awaitWhole(primary func() (*redistest.Server, error), replicas int) error {
	deadline := time.Now().Add(failoverTimeout)
	for {
		p, err := primary()
		if err == nil {
			var info string
			if info, err = p.Do("INFO", "replication"); err == nil &&
				strings.Contains(info, "role:master") && strings.Count(info, "state=online") == replicas {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no primary with %d replicas online after %s (last: %v)", replicas, failoverTimeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// longRun reports whether CHAOS_SECONDS is set, as `make chaos` sets it:
// the faults that depend most on a loaded machine run only then.
func longRun() bool { return os.Getenv("CHAOS_SECONDS") != "" }

// measurementOnly skips a chaos mode whose point is a figure (how often
// children overlap where nothing promises they will not) unless
// CHAOS_SECONDS is set, as `make chaos` sets it. Its checks are the ones
// the exclusive modes make too, and a Redis deployment that fails to heal
// within the fault's timeout, which a busy 2-core machine sometimes sees,
// would fail `make test` for a figure.
func measurementOnly(t *testing.T) {
	t.Helper()
	if !longRun() {
		t.Skip("a measurement of overlaps without min_replicas: make chaos runs it")
	}
}

// sentinelReplicas is how many replicas the Sentinel deployment has.
const sentinelReplicas = 2

// startSentinel starts a primary, two replicas and three sentinels.
func startSentinel(t *testing.T) *redistest.Sentinel {
	t.Helper()
	topo, err := redistest.StartSentinel(redistest.SentinelOptions{Replicas: sentinelReplicas})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { topo.Stop() })
	return topo
}

// TestChaosSentinel: Sentinel failovers with min_replicas=1, among the
// supervisor and child faults. No two children may ever be alive at once.
func TestChaosSentinel(t *testing.T) {
	topo := startSentinel(t)
	h := newHarness(t, "chaos-sentinel", topo.URL()+"&min_replicas=1")
	h.chaos(duration(t), append(sentinelFaults(topo, sentinelReplicas), killSupervisor, stopSupervisor, killChild), exclusive)
}

// TestChaosSentinelAsync: the same failovers without min_replicas. Overlaps
// are reported, not failed: asynchronous replication promises none.
func TestChaosSentinelAsync(t *testing.T) {
	measurementOnly(t)
	topo := startSentinel(t)
	h := newHarness(t, "chaos-sentinel-async", topo.URL())
	h.chaos(duration(t), append(sentinelFaults(topo, sentinelReplicas), killSupervisor, killChild), overlapsReported)
}

// clusterFaults are the faults of a Redis Cluster: slots moved between
// primaries while leases run (clients follow MOVED and ASK) and, in a long
// run (make chaos), the primary that holds the job's keys SIGKILLed (its
// replica takes over; the old primary comes back as a replica). make test
// leaves the kills out: on a loaded 2-core machine Redis Cluster sometimes
// neither elects a replica nor takes a forced takeover within 30 s, which
// fails the run for Redis's sake. make test still kills primaries in the
// Sentinel mode.
// reshardSpacing is the least time from the end of a reshard to the next.
const reshardSpacing = 2 * time.Second

func clusterFaults(c *redistest.Cluster, namespace string) []fault {
	nodes := append(append([]*redistest.Server{}, c.Masters...), c.Replicas...)
	kill := fault{"kill-cluster-primary", func(h *harness, _ *rand.Rand) (bool, error) {
		victim := clusterPrimaryWith(nodes, namespace+":*")
		if victim == nil {
			return false, nil
		}
		if err := victim.Kill(); err != nil {
			return false, err
		}
		if err := awaitPromotion(h, nodes, victim, len(c.Masters)); err != nil {
			return false, err
		}
		if err := victim.Restart(); err != nil {
			return false, err
		}
		return true, awaitClusterOK(nodes, len(c.Masters))
	}}
	// Back to back, on a loaded machine, reshards kept the job's slot
	// migrating for most of a run (4 holders in 60 s once): space them.
	spaced := &spacing{least: reshardSpacing}
	reshard := fault{"reshard", func(_ *harness, rng *rand.Rand) (bool, error) {
		if !spaced.due() {
			return false, nil
		}
		defer spaced.restart()
		masters := clusterPrimaries(nodes)
		if len(masters) < 2 {
			return false, nil
		}
		i := rng.IntN(len(masters))
		from, to := masters[i], masters[(i+1)%len(masters)]
		return true, redistest.Reshard(from, to, 1000+rng.IntN(2000))
	}}
	if !longRun() {
		return []fault{reshard}
	}
	return []fault{kill, reshard}
}

// clusterPrimaries are the running nodes that report role:master.
func clusterPrimaries(nodes []*redistest.Server) []*redistest.Server {
	var masters []*redistest.Server
	for _, n := range nodes {
		if info, err := n.Do("INFO", "replication"); err == nil && strings.Contains(info, "role:master") {
			masters = append(masters, n)
		}
	}
	return masters
}

// clusterPrimaryWith is the primary holding a key matching pattern, or nil.
func clusterPrimaryWith(nodes []*redistest.Server, pattern string) *redistest.Server {
	for _, m := range clusterPrimaries(nodes) {
		if keys, err := m.Do("KEYS", pattern); err == nil && keys != "" {
			return m
		}
	}
	return nil
}

// forceTakeoverAfter is how long awaitPromotion lets the cluster elect a
// replica by itself before it forces one.
const forceTakeoverAfter = 10 * time.Second

// awaitPromotion waits until want primaries run again: a replica took
// over from the killed primary victim. Redis Cluster sometimes elects none
// (a replica whose link to its primary broke too long ago, after a
// resharding on a loaded machine, is not eligible); after
// forceTakeoverAfter the victim's replicas are told to take over, as an
// operator would (CLUSTER FAILOVER TAKEOVER): the test is of leasectl
// through a failover, not of Redis's election rules.
func awaitPromotion(h *harness, nodes []*redistest.Server, victim *redistest.Server, want int) error {
	deadline := time.Now().Add(failoverTimeout)
	force := time.Now().Add(forceTakeoverAfter)
	for len(clusterPrimaries(nodes)) != want {
		now := time.Now()
		if now.After(deadline) {
			return fmt.Errorf("no replica took over after %s", failoverTimeout)
		}
		if now.After(force) {
			h.t.Logf("no replica of %s took over in %s: forcing a takeover", victim.Addr, forceTakeoverAfter)
			forceTakeover(nodes, victim)
			force = deadline
		}
		time.Sleep(50 * time.Millisecond)
	}
	return nil
}

// forceTakeover tells every running replica of victim to take over at
// once, without the other primaries' votes.
func forceTakeover(nodes []*redistest.Server, victim *redistest.Server) {
	_, port, _ := strings.Cut(victim.Addr, ":")
	for _, n := range nodes {
		if n == victim {
			continue
		}
		info, err := n.Do("INFO", "replication")
		if err != nil || !strings.Contains(info, "role:slave") {
			continue
		}
		for _, line := range strings.Split(info, "\n") {
			if strings.TrimSpace(line) == "master_port:"+port {
				_, _ = n.Do("CLUSTER", "FAILOVER", "TAKEOVER")
			}
		}
	}
}

// awaitClusterOK waits until want primaries run, each with a replica
// online, and every running node says cluster_state:ok.
func awaitClusterOK(nodes []*redistest.Server, want int) error {
	deadline := time.Now().Add(failoverTimeout)
	for {
		primaries := clusterPrimaries(nodes)
		ok := len(primaries) == want
		for _, p := range primaries {
			if info, err := p.Do("INFO", "replication"); err != nil || !strings.Contains(info, "state=online") {
				ok = false
			}
		}
		for _, n := range nodes {
			if info, err := n.Do("CLUSTER", "INFO"); err == nil && !strings.Contains(info, "cluster_state:ok") {
				ok = false
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("the cluster is not back to %d primaries and state ok after %s", want, failoverTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// startCluster starts three primaries with a replica each, detecting a
// dead primary after a second.
func startCluster(t *testing.T) *redistest.Cluster {
	t.Helper()
	c, err := redistest.StartCluster(redistest.ClusterOptions{Replicas: 1, Args: []string{"--cluster-node-timeout", "1000"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	return c
}

// clusterURL is the redis+cluster:// URL of c.
func clusterURL(c *redistest.Cluster) string {
	return "redis+cluster://" + strings.TrimPrefix(c.URL(), "redis://")
}

// TestChaosCluster: failovers of the primary holding the job and slots
// moving between primaries, with min_replicas=1. No two children may ever
// be alive at once.
func TestChaosCluster(t *testing.T) {
	c := startCluster(t)
	h := newHarness(t, "chaos-cluster", clusterURL(c)+"&min_replicas=1")
	h.chaos(duration(t), append(clusterFaults(c, "chaos"), killSupervisor, stopSupervisor, killChild), exclusive)
}

// TestChaosClusterAsync: the same faults without min_replicas; overlaps are
// reported, not failed.
func TestChaosClusterAsync(t *testing.T) {
	measurementOnly(t)
	c := startCluster(t)
	h := newHarness(t, "chaos-cluster-async", clusterURL(c))
	h.chaos(duration(t), append(clusterFaults(c, "chaos"), killSupervisor, killChild), overlapsReported)
}

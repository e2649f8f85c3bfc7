package redisstore

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/faultproxy"
	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/failover"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// The silence of a node that holds no data the runs need (a Sentinel, a
// replica, a cluster seed the client reaches through a path of its own)
// costs nothing: storetest.RideOutSilence's runs keep their leases and new
// ones start within a second. A silent primary holds the only copy a
// renewal can reach until Sentinel or the cluster replace it, after
// down-after-milliseconds or the node timeout (1 s in these tests) and an
// election: silentPrimary is the timing that rides that out, the smallest
// docs/design.md §3.2 gives for it rounded up for a loaded machine.
var silentPrimary = storetest.Silence{
	TTL: 12 * time.Second, Heartbeat: 2 * time.Second, Safety: 6 * time.Second,
	For: 18 * time.Second,
	// Detection (1 s), the election and promotion, and the copy that
	// finds the replacement: copies go out 0.5, 1.5 and 3.5 s after the
	// request, so one lands within 3.5 s of a failover done in 3 s.
	NewRunWithin: 4 * time.Second,
}

// freezes returns a silence that freezes srv (SIGSTOP) until it is called
// back or the test ends.
func freezes(t *testing.T, srv *redistest.Server) func() {
	return func() {
		if err := srv.Freeze(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { srv.Thaw() })
	}
}

// freezesCaughtUp is freezes for a primary, once its replicas have every
// write it took: Redis replicates asynchronously, so a failover can lose the
// newest writes (min_replicas guards against that; these tests are about
// the silence, not about that loss).
func freezesCaughtUp(t *testing.T, primary *redistest.Server) func() {
	freeze := freezes(t, primary)
	return func() {
		deadline := time.Now().Add(storetest.HangGuard)
		for !caughtUp(t, primary) {
			if time.Now().After(deadline) {
				t.Fatalf("the replicas of %s did not catch up within %s", primary.Addr, storetest.HangGuard)
			}
			// Nothing to await: replication offsets are only polled.
			time.Sleep(5 * time.Millisecond)
		}
		freeze()
	}
}

// caughtUp reports whether primary has a replica, and every replica has
// acknowledged its whole replication stream.
func caughtUp(t *testing.T, primary *redistest.Server) bool {
	info, err := primary.Do("INFO", "replication")
	if err != nil {
		t.Fatal(err)
	}
	var head int64 = -1
	var offsets []int64
	for _, line := range strings.Split(info, "\n") {
		line = strings.TrimSpace(line)
		if v, ok := strings.CutPrefix(line, "master_repl_offset:"); ok {
			head, _ = strconv.ParseInt(v, 10, 64)
		}
		if strings.HasPrefix(line, "slave") && strings.Contains(line, "offset=") {
			_, rest, _ := strings.Cut(line, "offset=")
			n, _ := strconv.ParseInt(strings.Split(rest, ",")[0], 10, 64)
			offsets = append(offsets, n)
		}
	}
	if head < 0 || len(offsets) == 0 {
		return false
	}
	for _, n := range offsets {
		if n < head {
			return false
		}
	}
	return true
}

// blackholed starts a proxy to addr, which the test lists in place of
// addr, and returns its address and a silence that makes it stop
// forwarding without closing.
func blackholed(t *testing.T, addr string) (string, func()) {
	p, err := faultproxy.Start(addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p.Addr(), func() { p.Set(faultproxy.DropBoth) }
}

// TestSentinelSilentNode makes a Sentinel (frozen, or blackholed on the
// client's path) or a replica (frozen) silent: runs ride it out. go-redis
// asks every Sentinel at once for the primary and waits for them all, so a
// new process's first connection waits on a silent one until its copy,
// after the hedge bound, dials through the Sentinel that answered.
func TestSentinelSilentNode(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"sentinel-frozen", "sentinel-blackholed", "replica-frozen"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			topo := startSentinel(t, redistest.SentinelOptions{})
			url := topo.URL()
			var silence func()
			switch fault {
			case "sentinel-frozen":
				silence = freezes(t, topo.Sentinels()[0])
			case "sentinel-blackholed":
				first := topo.Sentinels()[0].Addr
				var proxy string
				proxy, silence = blackholed(t, first)
				url = strings.Replace(url, first, proxy, 1)
			case "replica-frozen":
				replicas, err := topo.Replicas()
				if err != nil {
					t.Fatal(err)
				}
				silence = freezes(t, replicas[0])
			}
			ns := freshNamespace()
			storetest.RideOutSilence(t, func(t *testing.T) leasestore.Driver { return openRedis(t, url, ns) }, silence)
		})
	}
}

// TestSentinelSilentPrimary freezes the primary for three safety windows:
// Sentinel promotes a replica after down-after-milliseconds and an
// election, and the copies of the renewals and grants waiting on the
// frozen primary reach it. With --safety above that (silentPrimary), the
// holders keep their leases and new runs wait only for the failover.
func TestSentinelSilentPrimary(t *testing.T) {
	t.Parallel()
	topo := startSentinel(t, redistest.SentinelOptions{})
	primary, err := topo.Primary()
	if err != nil {
		t.Fatal(err)
	}
	ns := freshNamespace()
	storetest.RideOutSilenceWith(t, silentPrimary, func(t *testing.T) leasestore.Driver { return openRedis(t, topo.URL(), ns) }, freezesCaughtUp(t, primary))
}

// silentCluster starts a cluster of three primaries with a replica each,
// which fails a primary over after a second of silence.
func silentCluster(t *testing.T) (*redistest.Cluster, string) {
	t.Helper()
	c := startCluster(t, redistest.ClusterOptions{Replicas: 1, Args: []string{"--cluster-node-timeout", "1000"}})
	return c, "redis+cluster://" + strings.TrimPrefix(c.URL(), "redis://")
}

// TestClusterSilentNode makes a replica silent (frozen), or the seed node
// the client asks for the slot map first blackholed on the client's path:
// runs ride it out. (A frozen primary is TestClusterSilentPrimary's: the
// cluster refuses every slot, CLUSTERDOWN, once it deems one unreachable,
// until a replica took over.)
func TestClusterSilentNode(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"replica-frozen", "seed-blackholed"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			c, url := silentCluster(t)
			var silence func()
			switch fault {
			case "replica-frozen":
				silence = freezes(t, c.Replicas[0])
			case "seed-blackholed":
				// Every seed but the proxy: the client asks a seed it
				// picks at random, so a silent one is asked first by a
				// third of the runs.
				seed := c.Masters[0].Addr
				var proxy string
				proxy, silence = blackholed(t, seed)
				url = strings.Replace(url, seed, proxy, 1)
			}
			ns := freshNamespace()
			storetest.RideOutSilence(t, func(t *testing.T) leasestore.Driver { return openRedis(t, url, ns) }, silence)
		})
	}
}

// TestClusterSilentPrimary freezes the primary that holds the runs' keys
// for three safety windows: the cluster promotes its replica after the node
// timeout, and the copies, sent once the client reloaded its slot map,
// reach it.
func TestClusterSilentPrimary(t *testing.T) {
	t.Parallel()
	c, url := silentCluster(t)
	ns := freshNamespace()
	s := openRedis(t, url, ns)
	var owner *redistest.Server
	for _, job := range []string{"held1", "held2", "next"} {
		n, err := s.nodeFor(storetest.Ctx(t), s.jobKeys(job)[0])
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range c.Masters {
			if m.Addr == n.Options().Addr && owner == nil {
				owner = m
			}
		}
	}
	storetest.RideOutSilenceWith(t, silentPrimary, func(t *testing.T) leasestore.Driver { return openRedis(t, url, ns) }, freezesCaughtUp(t, owner))
}

// TestLateCopyOfAnAcquireGrantsNothing holds Redis's replies for twice the
// hedge bound: the acquire is granted, heard only after its copy went out
// on a connection of its own (which gets the same lease, or is still
// dialing). Once the run has
// released it, a copy of that acquire that lands late (here: the script
// run again, as a copy delayed in the network would run it) must be
// refused, leaving the job idle, not granted to a run nobody runs.
func TestLateCopyOfAnAcquireGrantsNothing(t *testing.T) {
	srv := testRedis.Get(t)
	proxy, err := faultproxy.Start(srv.Addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { proxy.Close() })
	ns := freshNamespace()
	s, direct := openRedis(t, "redis://"+proxy.Addr(), ns), openRedis(t, srv.URL, ns)
	// A connection, and the scripts loaded: the acquire is one round trip.
	storetest.Release(t, s, storetest.Acquire(t, s, storetest.Request("other", "worker-0", storetest.SilenceTTL)), leasestore.ResultCompleted)
	ctx, cancel := context.WithTimeout(t.Context(), storetest.SilenceSafety)
	defer cancel()
	proxy.Delay(2 * failover.HedgeAfter(ctx))
	req := storetest.Request("job", "worker-1", storetest.SilenceTTL)
	l, err := s.Acquire(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	if st := storetest.Status(t, direct, "job"); st.Attempts != 1 || st.Holder == nil || st.Holder.Token != l.Token {
		t.Fatalf("after the acquire sent twice: %d attempts, holder %+v; want one grant, token %d", st.Attempts, st.Holder, l.Token)
	}
	proxy.Delay(0)
	if err := s.Release(ctx, l, leasestore.Outcome{Result: leasestore.ResultCompleted}); err != nil {
		t.Fatal(err)
	}
	if late, err := direct.Acquire(ctx, req); err == nil {
		t.Errorf("a late copy of the acquire was granted token %d after the run released its lease", late.Token)
	}
	if st := storetest.Status(t, direct, "job"); st.State != leasestore.StateIdle {
		t.Errorf("after the late copy the job is %s (holder %+v), want IDLE", st.State, st.Holder)
	}
}

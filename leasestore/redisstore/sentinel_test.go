package redisstore

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// sentinelHarness makes each test's store in a namespace of its own on a
// Sentinel-managed primary, opened by go-redis's failover URL; a wipe
// flushes the primary (the replicas follow).
type sentinelHarness struct{ topo *redistest.Sentinel }

func (h sentinelHarness) NewStore(testing.TB) storetest.Fixture {
	ns := freshNamespace()
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver { return openRedis(t, h.topo.URL(), ns) },
		Wipe: func(t testing.TB) {
			primary, err := h.topo.Primary()
			if err == nil {
				_, err = primary.Do("FLUSHALL")
			}
			if err != nil {
				t.Fatal(err)
			}
		},
	}
}

func (sentinelHarness) Abilities() storetest.Abilities {
	return storetest.Abilities{CommonHistoryWords: true, WakesInTurn: true}
}

// startSentinel starts a primary, its replicas and three sentinels, stopped
// when the test ends.
func startSentinel(t *testing.T, opts redistest.SentinelOptions) *redistest.Sentinel {
	t.Helper()
	topo, err := redistest.StartSentinel(opts)
	return testserver.Own(t, topo, err)
}

// TestSentinelConformance runs the whole contract through Sentinel, with the
// sentinels' password apart from the data nodes'.
func TestSentinelConformance(t *testing.T) {
	topo := startSentinel(t, redistest.SentinelOptions{Password: "data-Pa55", SentinelPassword: "sentinel-Pa55"})
	storetest.Run(t, sentinelHarness{topo})
}

// cutReplicasOff lets both replicas catch up with s's primary, then cuts
// them off: they cannot log in again once the primary wants a password
// they do not have. The store's own connection is logged in already, so
// what it writes next reaches the primary alone.
func cutReplicasOff(t *testing.T, s *Store) {
	t.Helper()
	if _, err := s.rdb.Do(storetest.Ctx(t), "WAIT", 2, 5000).Result(); err != nil {
		t.Fatal(err)
	}
	_, err := s.rdb.Pipelined(storetest.Ctx(t), func(p redis.Pipeliner) error {
		p.ConfigSet(storetest.Ctx(t), "requirepass", "cut-the-replicas-off")
		p.Do(storetest.Ctx(t), "CLIENT", "KILL", "TYPE", "replica")
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// TestSentinelPromotedReplicaMissedTheGrant promotes a replica that never
// saw the last grant: the job's record on the new primary is older, and the
// next token must still be above the lost one (the clock floor).
func TestSentinelPromotedReplicaMissedTheGrant(t *testing.T) {
	topo := startSentinel(t, redistest.SentinelOptions{})
	ns := freshNamespace()
	s := openRedis(t, topo.URL(), ns)
	storetest.Release(t, s, storetest.Acquire(t, s, storetest.Request("job", "w1", storetest.LongTTL)), leasestore.ResultCompleted)
	cutReplicasOff(t, s)
	lost := storetest.Acquire(t, s, storetest.Request("job", "w2", storetest.LongTTL))
	primary, err := topo.Primary()
	if err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.WaitFailover(failoverTimeout); err != nil {
		t.Fatal(err)
	}
	after := openRedis(t, topo.URL(), ns)
	if st := storetest.Status(t, after, "job"); st.LastToken >= lost.Token {
		t.Fatalf("the promoted replica has token %d: it did not miss the grant of %d", st.LastToken, lost.Token)
	}
	next := storetest.Acquire(t, after, storetest.Request("job", "w3", storetest.LongTTL))
	if next.Token <= lost.Token {
		t.Fatalf("token %d after the failover, not above %d granted by the lost primary", next.Token, lost.Token)
	}
}

// failoverTimeout bounds a Sentinel failover: only a hang takes this long.
const failoverTimeout = 60 * time.Second

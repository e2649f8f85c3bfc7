package redisstore

import (
	"context"
	"strings"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// clusterHarness makes each test's store in a namespace of its own on a
// Redis Cluster, opened by a redis+cluster:// URL naming one seed node; a
// wipe flushes every primary.
type clusterHarness struct{ c *redistest.Cluster }

func (h clusterHarness) NewStore(testing.TB) storetest.Fixture {
	ns := freshNamespace()
	seed := "redis+cluster://" + h.c.Addrs()[0]
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver { return openRedis(t, seed, ns) },
		Wipe: func(t testing.TB) {
			rdb := openRedis(t, seed, ns).rdb.(*redis.ClusterClient)
			err := rdb.ForEachMaster(storetest.Ctx(t), func(ctx context.Context, node *redis.Client) error {
				return node.FlushAll(ctx).Err()
			})
			if err != nil {
				t.Fatal(err)
			}
		},
	}
}

func (clusterHarness) Abilities() storetest.Abilities {
	return storetest.Abilities{CommonHistoryWords: true, WakesInTurn: true}
}

// startCluster starts a Redis Cluster stopped when the test ends.
func startCluster(t *testing.T, opts redistest.ClusterOptions) *redistest.Cluster {
	t.Helper()
	c, err := redistest.StartCluster(opts)
	return testserver.Own(t, c, err)
}

// TestClusterConformance runs the whole contract on a real 3-primary Redis
// Cluster: every script must touch one slot only (a CROSSSLOT or
// "non local key" error fails it), and the store-wide views must gather
// every primary's shards.
func TestClusterConformance(t *testing.T) {
	storetest.Run(t, clusterHarness{startCluster(t, redistest.ClusterOptions{})})
}

// TestClusterMinReplicas grants and renews on a cluster whose primaries each
// have a replica, waiting for it on the node that owns the job's slot.
func TestClusterMinReplicas(t *testing.T) {
	c := startCluster(t, redistest.ClusterOptions{Replicas: 1})
	url := "redis+cluster://" + strings.TrimPrefix(c.URL(), "redis://") + "&min_replicas=1"
	s := openRedis(t, url, freshNamespace())
	for _, job := range []string{"a", "b", "c", "d", "e", "f"} {
		l := storetest.Acquire(t, s, storetest.Request(job, "w", storetest.LongTTL))
		if err := s.Renew(storetest.Ctx(t), l); err != nil {
			t.Fatalf("Renew of %s with min_replicas=1: %v", job, err)
		}
	}
}

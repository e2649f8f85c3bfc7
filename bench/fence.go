//go:build linux

package main

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/leasectl/leasectl/fence"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/redisstore"
)

// Sizes of the fencing figures.
const (
	fenceSpan     = time.Second // checks per pattern: as many as fit, each timed
	fenceMaxCheck = 2_000_000   // and at most this many
	fenceWarmup   = 1_000       // checks not counted: connections, the watch
)

// fenceFigures measures package fence's checks per second and their p50 and
// p99 latency in each pattern, one goroutine checking the current token of
// a job held on the bench's Redis: every check is accepted, the cached
// patterns from memory, the authoritative one with a store round trip.
// Each check is timed with two monotonic clock reads, which are included.
func (b *bench) fenceFigures() error {
	d, err := redisstore.Open(b.redis.URL, "fence-bench")
	if err != nil {
		return err
	}
	store := leasestore.New(d)
	defer store.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	lease, err := store.Acquire(ctx, request("fence-bench", time.Hour, 3))
	if err != nil {
		return err
	}
	defer store.Release(context.Background(), lease, leasestore.Outcome{Result: leasestore.ResultCompleted})
	for _, p := range []fence.Pattern{fence.Authoritative, fence.BoundedStaleness, fence.WriteThrough} {
		c, err := fence.New(store, fence.Options{Pattern: p})
		if err != nil {
			return err
		}
		lat, elapsed, stats, err := timeChecks(ctx, c, lease.Job, lease.Token)
		c.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		slices.Sort(lat)
		pct := func(q float64) float64 { return float64(lat[int(q*float64(len(lat)-1))]) / 1e3 }
		name := "fence_" + map[fence.Pattern]string{
			fence.Authoritative: "authoritative", fence.BoundedStaleness: "bounded", fence.WriteThrough: "write_through",
		}[p]
		hits := fmt.Sprintf("%d checks, %d asked Redis", len(lat), stats.StoreChecks)
		line(name+"_checks_per_s", float64(len(lat))/elapsed.Seconds(), "checks/s", p.String()+"; "+hits)
		target := "a local Redis round trip"
		if p != fence.Authoritative {
			target = "target well under 1 us on a hit"
		}
		line(name+"_p50_us", pct(0.50), "us", target)
		line(name+"_p99_us", pct(0.99), "us", "")
	}
	return nil
}

// timeChecks checks token for up to fenceSpan after a warm-up and returns
// each check's latency in ns, the time taken and the checker's counters of
// the timed checks.
func timeChecks(ctx context.Context, c *fence.Checker, job string, token int64) ([]int64, time.Duration, fence.Stats, error) {
	for range fenceWarmup {
		if err := c.Check(ctx, job, token); err != nil {
			return nil, 0, fence.Stats{}, err
		}
	}
	before := c.Stats()
	lat := make([]int64, 0, fenceMaxCheck)
	start := time.Now()
	deadline := start.Add(fenceSpan)
	for len(lat) < fenceMaxCheck {
		t0 := time.Now()
		if err := c.Check(ctx, job, token); err != nil {
			return nil, 0, fence.Stats{}, err
		}
		t1 := time.Now()
		lat = append(lat, int64(t1.Sub(t0)))
		if t1.After(deadline) {
			break
		}
	}
	elapsed := time.Since(start)
	after := c.Stats()
	after.StoreChecks -= before.StoreChecks
	return lat, elapsed, after, nil
}

//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/leasestore"

	// The stores seed and scan open by URL, with leasestore.Open.
	_ "github.com/leasectl/leasectl/leasestore/etcdstore"
	_ "github.com/leasectl/leasectl/leasestore/pgstore"
	_ "github.com/leasectl/leasectl/leasestore/redisstore"
)

// Sizes of the store figures (docs/design.md §8).
const (
	scanLive     = 99_000 // in-flight jobs whose lease is live
	scanCrashed  = 1_000  // in-flight jobs whose supervisor vanished
	scanRounds   = 3      // Store.Scan rounds, each over fresh crashes
	memoryJobs   = 5_000  // jobs whose memory is measured
	seedClients  = 8      // concurrent clients seeding, as many supervisors would
	storeTimeout = 2 * time.Minute
	// crashTTL is the lease of a seeded crashed run: it lapses at once.
	crashTTL = time.Millisecond
)

// storeFigures measures Scan and Redis memory on a Redis of their own, so
// that nothing else's keys count.
func (b *bench) storeFigures() error {
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	if err := b.memory(ctx, srv); err != nil {
		return fmt.Errorf("memory: %w", err)
	}
	if _, err := srv.Do("FLUSHALL"); err != nil {
		return err
	}
	if err := b.scan(ctx, srv.URL, "leasectl", "scan", nil); err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	return nil
}

// request is an acquire shaped like production's: a worker ID of
// host:pid:8 hex digits, a short command line, the default evidence TTL.
func request(job string, ttl time.Duration, maxCrashes int) leasestore.AcquireRequest {
	return leasestore.AcquireRequest{
		Job: job, Holder: "worker-07:48213:9f3a1c2e", Host: "worker-07", PID: 48213,
		Command: []string{"./encode.sh", "--input", "/data/in.mp4"},
		TTL:     ttl, EvidenceTTL: time.Hour, MaxCrashes: maxCrashes,
	}
}

// seed runs do for jobs 0..n-1 from seedClients clients at once, each a
// store of its own at url, in namespace.
func seed(ctx context.Context, url, namespace string, n int, do func(s *leasestore.Store, i int) error) error {
	clients := make([]*leasestore.Store, seedClients)
	for w := range clients {
		s, err := leasestore.Open(ctx, url, namespace)
		if err != nil {
			return err
		}
		defer s.Close()
		clients[w] = s
	}
	var wg sync.WaitGroup
	errs := make(chan error, seedClients)
	for w, s := range clients {
		wg.Go(func() {
			for i := w; i < n; i += seedClients {
				if err := do(s, i); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// seedCrashes starts scanCrashed runs whose leases lapse at once, as if
// their supervisors had been SIGKILLed. They never reach quarantine, so
// each round crashes them again.
func seedCrashes(ctx context.Context, url, namespace string) error {
	err := seed(ctx, url, namespace, scanCrashed, func(s *leasestore.Store, i int) error {
		_, err := s.Acquire(ctx, request(fmt.Sprintf("crash-%04d", i), crashTTL, math.MaxInt32))
		return err
	})
	time.Sleep(5 * crashTTL)
	return err
}

// scan times Store.Scan and `leasectl scan` over scanLive live and
// scanCrashed crashed jobs in namespace of the store at url, and Store.Scan
// with no crash at all; its lines are named after prefix. settle, if not
// nil, runs once the live jobs are in (PostgreSQL's VACUUM ANALYZE).
func (b *bench) scan(ctx context.Context, url, namespace, prefix string, settle func() error) error {
	err := seed(ctx, url, namespace, scanLive, func(s *leasestore.Store, i int) error {
		_, err := s.Acquire(ctx, request(fmt.Sprintf("live-%06d", i), time.Hour, 3))
		return err
	})
	if err == nil && settle != nil {
		err = settle()
	}
	if err != nil {
		return err
	}
	s, err := leasestore.Open(ctx, url, namespace)
	if err != nil {
		return err
	}
	defer s.Close()
	timeScan := func(want int) (float64, error) {
		start := time.Now()
		found, err := s.Scan(ctx)
		d := ms(time.Since(start))
		if err == nil && len(found) != want {
			err = fmt.Errorf("scan found %d crashes, want %d", len(found), want)
		}
		return d, err
	}
	var rounds []float64
	for range scanRounds {
		if err := seedCrashes(ctx, url, namespace); err != nil {
			return err
		}
		d, err := timeScan(scanCrashed)
		if err != nil {
			return err
		}
		rounds = append(rounds, d)
	}
	none, err := timeScan(0)
	if err != nil {
		return err
	}
	if err := seedCrashes(ctx, url, namespace); err != nil {
		return err
	}
	cmd := b.leasectlAt(url, "--namespace", namespace, "scan", "--json")
	start := time.Now()
	out, err := cmd.Output()
	command := ms(time.Since(start))
	if err != nil {
		return fmt.Errorf("leasectl scan: %w", err)
	}
	var found []json.RawMessage
	if err := json.Unmarshal(out, &found); err != nil || len(found) != scanCrashed {
		return fmt.Errorf("leasectl scan --json printed %d crashes (%v), want %d", len(found), err, scanCrashed)
	}
	n := fmt.Sprintf("%d in flight, %d crashed", scanLive+scanCrashed, scanCrashed)
	line(prefix+"_ms", median(rounds), "ms", fmt.Sprintf("target <= 50; Store.Scan, %s; median of %d", n, scanRounds))
	line(prefix+"_no_crash_ms", none, "ms", fmt.Sprintf("Store.Scan, %d in flight, none crashed: cost follows the crashed jobs", scanLive+scanCrashed))
	line(prefix+"_command_ms", command, "ms", "leasectl scan --json, "+n+"; process start, connection and JSON output included")
	return nil
}

// memory measures used_memory per job at rest (record and a full history)
// and what a job in flight adds to it (liveness and evidence).
func (b *bench) memory(ctx context.Context, srv *redistest.Server) error {
	base, err := usedMemory(srv)
	if err != nil {
		return err
	}
	rested, running, err := restAndFlight(ctx, srv.URL, "leasectl", memoryJobs, func() (int64, error) { return usedMemory(srv) })
	if err != nil {
		return err
	}
	n := fmt.Sprintf("INFO used_memory delta over %d jobs", memoryJobs)
	line("redis_bytes_per_inflight_job", float64(running-rested)/memoryJobs, "bytes", "target <= 400; liveness + evidence; "+n)
	line("redis_bytes_per_job_at_rest", float64(rested-base)/memoryJobs, "bytes", fmt.Sprintf("target <= 2048; record + history of %d events; %s", leasestore.HistoryLimit, n))
	return nil
}

// restAndFlight takes n jobs of namespace in the store at url through
// enough runs to fill their histories (each run an acquired and a released
// event) and measures the store, then starts a run of each and measures it
// again: the jobs at rest, and with what running adds (their records and
// full histories keep their size).
func restAndFlight(ctx context.Context, url, namespace string, n int, measure func() (int64, error)) (rested, running int64, err error) {
	job := func(i int) string { return fmt.Sprintf("encode-%06d", i) }
	err = seed(ctx, url, namespace, n, func(s *leasestore.Store, i int) error {
		for range leasestore.HistoryLimit/2 + 1 {
			l, err := s.Acquire(ctx, request(job(i), time.Hour, 3))
			if err != nil {
				return err
			}
			if err := s.Release(ctx, l, leasestore.Outcome{Result: leasestore.ResultCompleted, Duration: 1200 * time.Millisecond}); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, 0, err
	}
	if rested, err = measure(); err != nil {
		return 0, 0, err
	}
	err = seed(ctx, url, namespace, n, func(s *leasestore.Store, i int) error {
		_, err := s.Acquire(ctx, request(job(i), time.Hour, 3))
		return err
	})
	if err != nil {
		return 0, 0, err
	}
	running, err = measure()
	return rested, running, err
}

// usedMemory is the server's INFO used_memory.
func usedMemory(srv *redistest.Server) (int64, error) {
	info, err := srv.Do("INFO", "memory")
	if err != nil {
		return 0, err
	}
	for _, l := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(l, "used_memory:"); ok {
			return strconv.ParseInt(v, 10, 64)
		}
	}
	return 0, fmt.Errorf("no used_memory in INFO memory")
}

//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/leasestore"

	// The embedded store, opened by URL like the others.
	_ "github.com/leasectl/leasectl/leasestore/filestore"
)

// Sizes of the reaper's figures with expectations (issue 25).
const (
	expectJobs   = 100_000 // jobs with an expectation
	overdueJobs  = 1_000   // of which overdue
	reaperRounds = 5       // passes timed, each after one untimed
)

// overdueFigures measures the reaper's pass over expectJobs jobs with an
// expectation, overdueJobs of them overdue, on Redis and on PostgreSQL,
// each a server of its own, and on the embedded store in a fresh folder: the pass without metrics (Scan and Overdue, a
// single `leasectl scan`), and with them (the counts and the statuses of
// the jobs with series as well, `scan --watch --metrics-addr`).
func (b *bench) overdueFigures() error {
	rsrv, err := redistest.Start(redistest.Options{})
	if err != nil {
		return err
	}
	defer rsrv.Stop()
	if err := b.reaperPass(rsrv.URL, "redis"); err != nil {
		return fmt.Errorf("redis: %w", err)
	}
	psrv, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		fmt.Printf("# PostgreSQL skipped: %v\n", err)
		return nil
	}
	defer psrv.Stop()
	if err := b.reaperPass(psrv.URL, "postgres"); err != nil {
		return fmt.Errorf("postgres: %w", err)
	}
	dir, err := os.MkdirTemp("", "leasectl-bench-overdue-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	if err := b.reaperPass("file://"+dir, "embedded"); err != nil {
		return fmt.Errorf("embedded: %w", err)
	}
	return nil
}

// reaperPass seeds the jobs in the store at url and times the reaper's
// passes; its lines are named after store.
func (b *bench) reaperPass(url, store string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 2*storeTimeout)
	defer cancel()
	note := leasestore.Note{By: "bench", Reason: "reaper figures"}
	err := seed(ctx, url, "leasectl", expectJobs, func(s *leasestore.Store, i int) error {
		every := time.Hour
		if i < overdueJobs {
			every = time.Millisecond
		}
		return s.Expect(ctx, fmt.Sprintf("job-%06d", i), &leasestore.Expectation{Every: every}, note)
	})
	if err != nil {
		return err
	}
	time.Sleep(5 * time.Millisecond) // the overdue ones' millisecond
	s, err := leasestore.Open(ctx, url, "leasectl")
	if err != nil {
		return err
	}
	defer s.Close()
	time1 := func(r *inspect.Reaper) (float64, error) {
		start := time.Now()
		if _, err := r.Pass(ctx); err != nil {
			return 0, err
		}
		list, err := r.Overdue(ctx)
		d := ms(time.Since(start))
		if err == nil && len(list) != overdueJobs {
			err = fmt.Errorf("%d jobs overdue, want %d", len(list), overdueJobs)
		}
		return d, err
	}
	var plain, metrics []float64
	for range reaperRounds {
		for _, m := range []*inspect.Metrics{nil, inspect.NewMetrics()} {
			r := &inspect.Reaper{Store: s, Metrics: m}
			if _, err := time1(r); err != nil { // warm: connections, scripts
				return err
			}
			d, err := time1(r)
			if err != nil {
				return err
			}
			if m == nil {
				plain = append(plain, d)
			} else {
				metrics = append(metrics, d)
			}
		}
	}
	n := fmt.Sprintf("%d jobs with an expectation, %d overdue; median of %d", expectJobs, overdueJobs, reaperRounds)
	line("reaper_pass_"+store+"_ms", median(plain), "ms", "target: the order of scan_ms (<= 50); Scan and Overdue, "+n)
	line("reaper_pass_metrics_"+store+"_ms", median(metrics), "ms",
		fmt.Sprintf("the same with metrics: counts, and the statuses of %d jobs with series; %s", inspect.JobSeriesLimit, n))
	return nil
}

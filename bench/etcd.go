//go:build linux

package main

import (
	"context"
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/etcdstore"
)

// Timing of the etcd fault figures: etcd's leases last whole seconds, at
// least 2, so the etcd runs cannot use the 1 s TTL of the other stores'.
const (
	etcdFaultTTL       = 2 * time.Second
	etcdFaultHeartbeat = 500 * time.Millisecond
	etcdFaultSafety    = time.Second
	// etcdCrashTTL is the lease of a seeded crashed run on etcd: the
	// shortest etcd honours.
	etcdCrashTTL = 2 * time.Second
	// expiryProbes is how many lease expiries the expiry lag is measured
	// over.
	expiryProbes = 10
)

// etcdFigures prints the etcd store's figures beside `etcdctl lock`'s: the
// handoff, interleaved with etcdctl's; the lag of
// etcd's lease expiry; failover after SIGKILL; fail-fast after the
// member is frozen; and a scan of 100,000 runs in flight of which 1,000
// crashed. The bench's etcd is a single member, its own leader.
func (b *bench) etcdFigures() error {
	if b.etcd == nil {
		return nil
	}
	for _, step := range []func() error{b.etcdHandoffs, b.etcdExpiryLag, b.etcdFailover, b.etcdFailFast, b.etcdScan} {
		if err := step(); err != nil {
			return fmt.Errorf("etcd: %w", err)
		}
	}
	return nil
}

// etcdStoreURL is the bench etcd's store URL.
func (b *bench) etcdStoreURL() string { return "etcd://" + strings.TrimPrefix(b.etcdURL, "http://") }

// etcdHandoffs times the handoff with --wait on etcd against etcdctl lock's,
// interleaved.
func (b *bench) etcdHandoffs() error {
	samples, err := b.handoffRuns(handoffRounds, b.leasectlHandoff("leasectl", b.etcdStoreURL()), b.etcdctlHandoff("etcdctl"))
	if err != nil {
		return fmt.Errorf("handoff %w", err)
	}
	lock := median(samples["etcdctl"])
	line("handoff_etcd_leasectl_ms", median(samples["leasectl"]), "ms",
		fmt.Sprintf("target < etcdctl lock's handoff, %.2f ms in the same run; median of %d, interleaved", lock, handoffRounds))
	return nil
}

// etcdExpiryLag measures how long after a lease's TTL etcd deletes its
// keys: its leader checks for expired leases every 500 ms, so a waiter
// learns of a crash up to that much after the TTL.
func (b *bench) etcdExpiryLag() error {
	s, err := etcdstore.Open(b.etcdStoreURL(), "expiry")
	if err != nil {
		return err
	}
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	var lags []float64
	for i := range expiryProbes {
		job := "probe-" + strconv.Itoa(i)
		sub, err := s.Subscribe(ctx, job, "")
		if err != nil {
			return err
		}
		sent := time.Now()
		if _, err := s.Acquire(ctx, request(job, etcdCrashTTL, math.MaxInt32)); err != nil {
			sub.Close()
			return err
		}
		select {
		case <-sub.Released():
		case <-ctx.Done():
			sub.Close()
			return ctx.Err()
		}
		lags = append(lags, ms(time.Since(sent)-etcdCrashTTL))
		sub.Close()
	}
	line("etcd_expiry_lag_ms", median(lags), "ms", fmt.Sprintf("the liveness key's deletion - (acquire sent + ttl): etcd's lease-expiry check; median of %d, max %.1f", expiryProbes, maxOf(lags)))
	return nil
}

// etcdTiming is the run flags of the etcd fault figures.
func etcdTiming() []string {
	return []string{"--ttl", etcdFaultTTL.String(), "--heartbeat", etcdFaultHeartbeat.String(), "--safety", etcdFaultSafety.String()}
}

// etcdFaults is the bench's etcd with the etcd fault timing.
func (b *bench) etcdFaults() faultStore {
	return faultStore{url: b.etcdStoreURL(), timing: etcdTiming(), heartbeat: etcdFaultHeartbeat}
}

// etcdFailover times SIGKILL of the holder's supervisor → the waiter's
// child starts, on etcd.
func (b *bench) etcdFailover() error {
	s, err := b.repeat(faultRounds, func() (float64, error) { return b.failoverOnce(b.etcdFaults(), etcdFaultHeartbeat) })
	if err != nil {
		return err
	}
	line("failover_etcd_ms", median(s), "ms", fmt.Sprintf("target <= ttl + etcd's lease-expiry check (500) = %.0f; ttl %s; median of %d, max %.1f",
		ms(etcdFaultTTL+500*time.Millisecond), etcdFaultTTL, faultRounds, maxOf(s)))
	return nil
}

// etcdFailFast times freezing the etcd member (the leader) → the holder's
// child dies.
func (b *bench) etcdFailFast() error {
	freeze := func() error { return b.etcd.Process.Signal(syscall.SIGSTOP) }
	thaw := func() error { return b.etcd.Process.Signal(syscall.SIGCONT) }
	s, err := b.repeat(faultRounds, func() (float64, error) { return b.failFastOnce(b.etcdFaults(), freeze, thaw) })
	if err != nil {
		return err
	}
	line("failfast_etcd_ms", median(s), "ms", fmt.Sprintf(
		"child death - etcd leader freeze (SIGSTOP); bound: last confirmed renewal's send + safety + 50 = send + %.0f, and that send precedes the freeze; safety %s, heartbeat %s; median of %d, max %.1f",
		ms(etcdFaultSafety+50*time.Millisecond), etcdFaultSafety, etcdFaultHeartbeat, faultRounds, maxOf(s)))
	return nil
}

// etcdScan times Store.Scan over scanLive live and scanCrashed crashed runs
// on etcd.
func (b *bench) etcdScan() error {
	ctx, cancel := context.WithTimeout(context.Background(), 4*storeTimeout)
	defer cancel()
	s, err := etcdstore.Open(b.etcdStoreURL(), "scan")
	if err != nil {
		return err
	}
	defer s.Close()
	seeded := time.Now()
	err = seed(ctx, b.etcdStoreURL(), "scan", scanLive, func(s *leasestore.Store, i int) error {
		_, err := s.Acquire(ctx, request(fmt.Sprintf("live-%06d", i), time.Hour, 3))
		return err
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "# etcd: seeded %d live runs in %s\n", scanLive, time.Since(seeded).Round(time.Second))
	// The first scan reads every key and leaves the mark the next ones
	// start from.
	start := time.Now()
	if _, err := s.Scan(ctx); err != nil {
		return err
	}
	cold := ms(time.Since(start))
	var rounds []float64
	for range scanRounds {
		err := seed(ctx, b.etcdStoreURL(), "scan", scanCrashed, func(s *leasestore.Store, i int) error {
			_, err := s.Acquire(ctx, request(fmt.Sprintf("crash-%04d", i), etcdCrashTTL, math.MaxInt32))
			return err
		})
		if err != nil {
			return err
		}
		for {
			c, err := s.Counts(ctx)
			if err != nil {
				return err
			}
			if c.InFlight <= scanLive {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		start := time.Now()
		found, err := s.Scan(ctx)
		if err != nil {
			return err
		}
		rounds = append(rounds, ms(time.Since(start)))
		if len(found) != scanCrashed {
			return fmt.Errorf("the scan found %d crashes, want %d", len(found), scanCrashed)
		}
	}
	start = time.Now()
	if _, err := s.Scan(ctx); err != nil {
		return err
	}
	none := ms(time.Since(start))
	n := fmt.Sprintf("%d in flight, %d crashed", scanLive+scanCrashed, scanCrashed)
	line("scan_etcd_ms", median(rounds), "ms", fmt.Sprintf("Store.Scan on etcd, %s; median of %d; Redis: scan_ms above", n, scanRounds))
	line("scan_etcd_no_crash_ms", none, "ms", fmt.Sprintf("Store.Scan on etcd, %d in flight, none crashed: cost follows the runs that ended since the last scan", scanLive+scanCrashed))
	line("scan_etcd_first_ms", cold, "ms", fmt.Sprintf("the first Store.Scan on etcd (no mark yet, or revisions compacted since): reads every in-flight key; %d in flight", scanLive))
	return nil
}

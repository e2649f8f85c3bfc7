package storetest

import (
	"context"
	"fmt"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Scale of BenchmarkScan: a store with ScanInFlight runs in flight, of which
// ScanCrashed crashed (docs/design.md: a scan at this scale within 50 ms).
const (
	ScanInFlight = 100_000
	ScanCrashed  = 1_000
)

// seedClients is how many clients seed a benchmark's store at once, as many
// supervisors would.
const seedClients = 8

// Benchmark times the operations every driver reports the same way, each on
// a fresh store from h: AcquireRelease (a whole `run -- true` of store
// work), Renew (a heartbeat), Status (an on-call read) and Scan (one reaper
// pass over ScanInFlight runs in flight of which ScanCrashed crashed, as
// ms/scan).
func Benchmark(b *testing.B, h Harness) {
	b.Run("AcquireRelease", func(b *testing.B) {
		s := client(b, h.NewStore(b))
		req := RealisticRequest("bench-job", time.Minute)
		out := leasestore.Outcome{Result: leasestore.ResultCompleted, Duration: time.Second}
		for b.Loop() {
			l, err := s.Acquire(b.Context(), req)
			if err != nil {
				b.Fatal(err)
			}
			if err := s.Release(b.Context(), l, out); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Renew", func(b *testing.B) {
		s := client(b, h.NewStore(b))
		l, err := s.Acquire(b.Context(), RealisticRequest("bench-job", time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if err := s.Renew(b.Context(), l); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("Status", func(b *testing.B) {
		s := client(b, h.NewStore(b))
		if _, err := s.Acquire(b.Context(), RealisticRequest("bench-job", time.Minute)); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := s.Status(b.Context(), "bench-job"); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run(fmt.Sprintf("Scan/inflight=%d/crashed=%d", ScanInFlight, ScanCrashed), func(b *testing.B) {
		f := h.NewStore(b)
		Seed(b, f, ScanInFlight-ScanCrashed, func(s Client, i int) error {
			_, err := s.Acquire(context.Background(), RealisticRequest(fmt.Sprintf("live-%06d", i), time.Hour))
			return err
		})
		s := client(b, f)
		crashTTL := max(time.Millisecond, h.Abilities().MinTTL)
		var scanned time.Duration
		for b.Loop() {
			b.StopTimer()
			// Each round's crashes: runs whose shortest lease lapses at once.
			Seed(b, f, ScanCrashed, func(s Client, i int) error {
				req := RealisticRequest(fmt.Sprintf("crash-%04d", i), crashTTL)
				req.MaxCrashes = math.MaxInt32 // crash every round without quarantine
				_, err := s.Acquire(context.Background(), req)
				return err
			})
			awaitInFlight(b, s, ScanInFlight-ScanCrashed, crashTTL)
			b.StartTimer()
			start := time.Now()
			found, err := s.Scan(b.Context())
			scanned += time.Since(start)
			if err != nil {
				b.Fatal(err)
			}
			if len(found) != ScanCrashed {
				b.Fatalf("Scan found %d crashes, want %d", len(found), ScanCrashed)
			}
		}
		b.ReportMetric(float64(scanned.Microseconds())/1000/float64(b.N), "ms/scan")
	})
}

// awaitInFlight waits, from ttl on, until the store counts want runs in
// flight: the crashed runs' leases have lapsed.
func awaitInFlight(b *testing.B, s Client, want int, ttl time.Duration) {
	b.Helper()
	time.Sleep(ttl)
	for guard := time.Now().Add(5*ttl + HangGuard); ; time.Sleep(5 * time.Millisecond) {
		c, err := s.Counts(b.Context())
		if err != nil {
			b.Fatal(err)
		}
		if c.InFlight <= want {
			return
		}
		if time.Now().After(guard) {
			b.Fatalf("%d runs in flight %s after the crashed runs' TTL, want %d", c.InFlight, 5*ttl+HangGuard, want)
		}
	}
}

// RealisticRequest is an acquire request shaped like production's: a
// worker ID of host:pid:8 hex digits, a short command line, the default
// evidence TTL and crash threshold.
func RealisticRequest(job string, ttl time.Duration) leasestore.AcquireRequest {
	return leasestore.AcquireRequest{
		Job: job, Holder: "worker-07:48213:9f3a1c2e", Host: "worker-07", PID: 48213,
		Command: []string{"./encode.sh", "--input", "/data/in.mp4"},
		TTL:     ttl, EvidenceTTL: time.Hour, MaxCrashes: 3,
	}
}

// Seed runs do for each of n jobs from several clients of f's store at
// once, as many supervisors would.
func Seed(b testing.TB, f Fixture, n int, do func(s Client, i int) error) {
	b.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, seedClients)
	for w := range seedClients {
		s := client(b, f)
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
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
}

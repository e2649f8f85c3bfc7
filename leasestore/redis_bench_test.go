package leasestore

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
)

// realisticRequest is an acquire request shaped like production's: a
// worker ID of host:pid:8 hex digits, a short command line, the default
// evidence TTL and crash threshold.
func realisticRequest(job string, ttl time.Duration) AcquireRequest {
	return AcquireRequest{
		Job: job, Holder: "worker-07:48213:9f3a1c2e", Host: "worker-07", PID: 48213,
		Command: []string{"./encode.sh", "--input", "/data/in.mp4"},
		TTL:     ttl, EvidenceTTL: time.Hour, MaxCrashes: 3,
	}
}

// seedParallel runs do for each of n jobs from several goroutines, each
// with its own client, as many supervisors would.
func seedParallel(b *testing.B, url, ns string, n int, do func(s *Redis, i int) error) {
	b.Helper()
	const workers = 8
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		s := openRedis(b, url, ns)
		wg.Go(func() {
			for i := w; i < n; i += workers {
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

// usedMemory is the server's INFO used_memory.
func usedMemory(b *testing.B, srv *redistest.Server) int64 {
	b.Helper()
	info, err := srv.Do("INFO", "memory")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(info, "\r\n") {
		if v, ok := strings.CutPrefix(line, "used_memory:"); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return n
		}
	}
	b.Fatalf("no used_memory in INFO memory:\n%s", info)
	return 0
}

func BenchmarkRedisAcquireRelease(b *testing.B) {
	s := openRedis(b, sharedRedis(b).URL, freshNamespace())
	ctx := b.Context()
	req := realisticRequest("bench-job", time.Minute)
	out := Outcome{Result: ResultCompleted, Duration: time.Second}
	for b.Loop() {
		l, err := s.Acquire(ctx, req)
		if err != nil {
			b.Fatal(err)
		}
		if err := s.Release(ctx, l, out); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkRedisRenew(b *testing.B) {
	s := openRedis(b, sharedRedis(b).URL, freshNamespace())
	ctx := b.Context()
	l, err := s.Acquire(ctx, realisticRequest("bench-job", time.Minute))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := s.Renew(ctx, l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRedisScan times one Scan over 100,000 in-flight jobs of which
// 1,000 crashed (DESIGN §8: at most 50 ms).
func BenchmarkRedisScan(b *testing.B) {
	const live, crashed = 99_000, 1_000
	srv := ownRedis(b)
	ns := "leasectl"
	seedParallel(b, srv.URL, ns, live, func(s *Redis, i int) error {
		_, err := s.Acquire(context.Background(), realisticRequest(fmt.Sprintf("live-%06d", i), time.Hour))
		return err
	})
	s := openRedis(b, srv.URL, ns)
	var scanned time.Duration
	for b.Loop() {
		b.StopTimer()
		// Each round's crashes: runs whose 1 ms lease lapses at once.
		seedParallel(b, srv.URL, ns, crashed, func(s *Redis, i int) error {
			req := realisticRequest(fmt.Sprintf("crash-%04d", i), time.Millisecond)
			req.MaxCrashes = math.MaxInt32 // crash every round without quarantine
			_, err := s.Acquire(context.Background(), req)
			return err
		})
		time.Sleep(5 * time.Millisecond)
		b.StartTimer()
		start := time.Now()
		found, err := s.Scan(b.Context())
		scanned += time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		if len(found) != crashed {
			b.Fatalf("Scan found %d crashes, want %d", len(found), crashed)
		}
	}
	b.ReportMetric(float64(scanned.Microseconds())/1000/float64(b.N), "ms/scan")
}

// BenchmarkRedisMemory measures the Redis memory of an in-flight job (its
// evidence and index entry, DESIGN §8: at most 400 bytes) and of a job at
// rest with a full history (record and history: at most 2 KB), from
// used_memory over many jobs.
func BenchmarkRedisMemory(b *testing.B) {
	const jobs = 10_000
	srv := ownRedis(b)
	ns := "leasectl"
	job := func(i int) string { return fmt.Sprintf("encode-%06d", i) }
	var inflight, atRest float64
	for b.Loop() {
		if _, err := srv.Do("FLUSHALL"); err != nil {
			b.Fatal(err)
		}
		base := usedMemory(b, srv)
		// At rest: every job through HistoryLimit/2 runs, each an acquired
		// and a released event.
		seedParallel(b, srv.URL, ns, jobs, func(s *Redis, i int) error {
			for range HistoryLimit / 2 {
				l, err := s.Acquire(context.Background(), realisticRequest(job(i), time.Hour))
				if err != nil {
					return err
				}
				if err := s.Release(context.Background(), l, Outcome{Result: ResultCompleted, Duration: 1200 * time.Millisecond}); err != nil {
					return err
				}
			}
			return nil
		})
		rested := usedMemory(b, srv)
		atRest = float64(rested-base) / jobs
		// In flight: the same jobs running again; then take their evidence
		// and index entries away again to count exactly those.
		seedParallel(b, srv.URL, ns, jobs, func(s *Redis, i int) error {
			_, err := s.Acquire(context.Background(), realisticRequest(job(i), 30*time.Second))
			return err
		})
		running := usedMemory(b, srv)
		logKeyUsage(b, srv, ns, job(0))
		for i := 0; i < jobs; i += 1000 {
			args := []string{"DEL"}
			for j := i; j < i+1000 && j < jobs; j++ {
				args = append(args, ns+":{"+job(j)+"}:e")
			}
			if _, err := srv.Do(args...); err != nil {
				b.Fatal(err)
			}
		}
		if _, err := srv.Do("DEL", ns+":live"); err != nil {
			b.Fatal(err)
		}
		inflight = float64(running-usedMemory(b, srv)) / jobs
	}
	b.ReportMetric(inflight, "bytes/inflight-job")
	b.ReportMetric(atRest, "bytes/job-at-rest")
}

// logKeyUsage logs MEMORY USAGE of each key of one job.
func logKeyUsage(b *testing.B, srv *redistest.Server, ns, job string) {
	b.Helper()
	for _, k := range []string{"e", "r", "h"} {
		key := ns + ":{" + job + "}:" + k
		n, err := srv.Do("MEMORY", "USAGE", key, "SAMPLES", "0")
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("MEMORY USAGE %s = %s bytes", key, n)
	}
}

package redisstore

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// BenchmarkStore reports the figures every store reports; each on a
// redis-server of its own, so that the scan at scale starts empty.
func BenchmarkStore(b *testing.B) { storetest.Benchmark(b, harness{ownRedis(b)}) }

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

// BenchmarkRedisMemory measures the Redis memory of an in-flight job (its
// evidence and index entry, docs/design.md: at most 400 bytes) and of a job
// at rest with a full history (record and history: at most 2 KB), from
// used_memory over many jobs.
func BenchmarkRedisMemory(b *testing.B) {
	const jobs = 10_000
	srv := ownRedis(b)
	ns := "leasectl"
	f := storetest.Fixture{Open: func(t testing.TB) leasestore.Driver { return openRedis(t, srv.URL, ns) }}
	job := func(i int) string { return fmt.Sprintf("encode-%06d", i) }
	s := openRedis(b, srv.URL, ns)
	var inflight, atRest float64
	for b.Loop() {
		if _, err := srv.Do("FLUSHALL"); err != nil {
			b.Fatal(err)
		}
		base := usedMemory(b, srv)
		// At rest: every job through HistoryLimit/2 runs, each an acquired
		// and a released event.
		storetest.Seed(b, f, jobs, func(s storetest.Client, i int) error {
			for range leasestore.HistoryLimit / 2 {
				l, err := s.Acquire(context.Background(), storetest.RealisticRequest(job(i), time.Hour))
				if err != nil {
					return err
				}
				if err := s.Release(context.Background(), l, leasestore.Outcome{Result: leasestore.ResultCompleted, Duration: 1200 * time.Millisecond}); err != nil {
					return err
				}
			}
			return nil
		})
		rested := usedMemory(b, srv)
		atRest = float64(rested-base) / jobs
		// In flight: the same jobs running again; then take their evidence
		// and index entries away again to count exactly those.
		storetest.Seed(b, f, jobs, func(s storetest.Client, i int) error {
			_, err := s.Acquire(context.Background(), storetest.RealisticRequest(job(i), 30*time.Second))
			return err
		})
		running := usedMemory(b, srv)
		logKeyUsage(b, srv, s, job(0))
		for i := range jobs {
			keys := s.jobKeys(job(i))
			if _, err := srv.Do("DEL", keys[0]); err != nil {
				b.Fatal(err)
			}
			if _, err := srv.Do("ZREM", keys[3], job(i)); err != nil {
				b.Fatal(err)
			}
		}
		inflight = float64(running-usedMemory(b, srv)) / jobs
	}
	b.ReportMetric(inflight, "bytes/inflight-job")
	b.ReportMetric(atRest, "bytes/job-at-rest")
}

// logKeyUsage logs MEMORY USAGE of the evidence, record and history of job.
func logKeyUsage(b *testing.B, srv *redistest.Server, s *Store, job string) {
	b.Helper()
	for _, key := range s.jobKeys(job)[:3] {
		n, err := srv.Do("MEMORY", "USAGE", key, "SAMPLES", "0")
		if err != nil {
			b.Fatal(err)
		}
		b.Logf("MEMORY USAGE %s = %s bytes", key, n)
	}
}

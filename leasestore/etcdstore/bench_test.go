package etcdstore

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// BenchmarkStore reports the figures every store reports, on an etcd of its
// own, so that the scan at scale starts empty.
func BenchmarkStore(b *testing.B) {
	c, err := etcdtest.Start(etcdtest.Options{Args: []string{"--quota-backend-bytes", "8589934592"}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Stop() })
	storetest.Benchmark(b, harness{c})
}

// BenchmarkRenewRoundTrip measures what keeping the holder's round trip
// costs a renewal (docs/etcd.md, Renewal round trips): none reported (a
// keep-alive and a read, as before round trips were kept); each renewal
// reporting the one before's, as the supervisor does (written when it
// moved past rttSlack: writes/renewal says how often); and one that moves
// past it at every renewal (a keep-alive and a guarded write every time:
// the worst case).
func BenchmarkRenewRoundTrip(b *testing.B) {
	for _, name := range []string{"none", "measured", "moving"} {
		b.Run(name, func(b *testing.B) {
			s := openEtcd(b, testEtcd.Get(b).URL(), freshNamespace())
			l, err := s.Acquire(b.Context(), storetest.RealisticRequest("bench-job", time.Minute))
			if err != nil {
				b.Fatal(err)
			}
			var held time.Duration // the round trip the evidence holds
			writes, i := 0, 0
			for b.Loop() {
				switch name {
				case "moving":
					l.RTT = time.Duration(1+i%2*19) * time.Millisecond // 1 ms, 20 ms, ...
				case "none":
					l.RTT = 0
				}
				if rttMoved(held, l.RTT) {
					held = l.RTT
					writes++
				}
				i++
				sent := time.Now()
				if err := s.Renew(b.Context(), l); err != nil {
					b.Fatal(err)
				}
				if name == "measured" {
					l.RTT = time.Since(sent)
				}
			}
			b.ReportMetric(float64(writes)/float64(i), "writes/renewal")
		})
	}
}

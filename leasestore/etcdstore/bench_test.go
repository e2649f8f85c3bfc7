package etcdstore

import (
	"testing"

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

package pgstore

import (
	"testing"

	"github.com/leasectl/leasectl/leasestore/storetest"
)

// BenchmarkStore reports the figures every store reports, on a server of
// its own, so that the scan at scale starts empty.
func BenchmarkStore(b *testing.B) { storetest.Benchmark(b, harness{ownPG(b)}) }

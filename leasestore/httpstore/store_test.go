package httpstore_test

import (
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/registrytest"
	"github.com/leasectl/leasectl/internal/testserver"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/redisstore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// testRedis is the package's redis-server.
var testRedis = testserver.Share("test redis-server", redistest.Start, redistest.Options{})

func TestMain(m *testing.M) { os.Exit(testserver.Run(m, testRedis)) }

var namespaces atomic.Int64

// freshNamespace is a namespace no other test uses.
func freshNamespace() string { return fmt.Sprintf("ht%d", namespaces.Add(1)) }

// embeddedHarness puts each test's registry in front of an embedded store
// in a folder of its own.
type embeddedHarness struct{}

func (embeddedHarness) NewStore(t testing.TB) storetest.Fixture {
	dir := t.TempDir()
	backend, err := filestore.Open(dir, "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	reg := registrytest.Start(t, leasestore.New(backend), "leasectl")
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver { return reg.Open(t, "leasectl", registrytest.OperatorToken) },
		Wipe: func(t testing.TB) {
			// The embedded store's data: one folder per namespace
			// (leasestore/filestore, file.go).
			data, err := filepath.Glob(filepath.Join(dir, "*.store"))
			if err != nil || len(data) != 1 {
				t.Fatalf("wipe: the embedded store's folders %v (%v), want one", data, err)
			}
			if err := os.RemoveAll(data[0]); err != nil {
				t.Fatalf("wipe: %v", err)
			}
		},
	}
}

func (embeddedHarness) Abilities() storetest.Abilities {
	return storetest.Abilities{CommonHistoryWords: true, WakesInTurn: true}
}

// redisHarness puts each test's registry in front of the shared Redis, in a
// namespace of its own; a wipe flushes the whole server.
type redisHarness struct{ srv *redistest.Server }

func (h redisHarness) NewStore(t testing.TB) storetest.Fixture {
	ns := freshNamespace()
	backend, err := redisstore.Open(h.srv.URL, ns)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = backend.Close() })
	reg := registrytest.Start(t, leasestore.New(backend), ns)
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver { return reg.Open(t, ns, registrytest.OperatorToken) },
		Wipe: func(t testing.TB) {
			if _, err := h.srv.Do("FLUSHALL"); err != nil {
				t.Fatal(err)
			}
		},
	}
}

func (redisHarness) Abilities() storetest.Abilities {
	return storetest.Abilities{CommonHistoryWords: true, WakesInTurn: true}
}

func TestConformanceEmbedded(t *testing.T) { storetest.Run(t, embeddedHarness{}) }

func TestConformanceRedis(t *testing.T) { storetest.Run(t, redisHarness{testRedis.Get(t)}) }

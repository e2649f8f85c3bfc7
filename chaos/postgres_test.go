package chaos

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/pgtest"
)

// chaosApp names the supervisors' PostgreSQL sessions, so that a fault can
// terminate them and no other.
const chaosApp = "leasectl-chaos"

// newPostgresHarness is newHarness on a PostgreSQL of the test's own.
func newPostgresHarness(t *testing.T, job string) (*harness, *pgtest.Server) {
	t.Helper()
	pg, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Stop() })
	return newHarness(t, job, pg.URL+"&application_name="+chaosApp), pg
}

// postgresFaults are the faults of the PostgreSQL mode on pg.
func postgresFaults(pg *pgtest.Server) []fault {
	return []fault{
		{"freeze-postgres", func(_ *harness, rng *rand.Rand) (bool, error) {
			if err := pg.Freeze(); err != nil {
				return false, err
			}
			time.Sleep(pause(rng, 200*time.Millisecond, 1200*time.Millisecond))
			return true, pg.Thaw()
		}},
		// A crash and restart: PostgreSQL keeps what it committed, so
		// unlike a Redis without persistence the lease survives, and no
		// two children may overlap through it.
		{"restart-postgres", func(*harness, *rand.Rand) (bool, error) {
			return true, pg.Restart()
		}},
		{"terminate-backends", func(*harness, *rand.Rand) (bool, error) {
			rows, err := pg.Query("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = " +
				pgtest.QuoteLiteral(chaosApp))
			return len(rows) > 0, err
		}},
	}
}

// TestChaosPostgres: the supervisors' faults of TestChaos against a
// PostgreSQL store, which is also frozen, crashed and restarted, and has
// its sessions terminated. No two children may ever be alive at once, and
// tokens rise with every holder.
func TestChaosPostgres(t *testing.T) {
	h, pg := newPostgresHarness(t, "chaos-pg")
	kinds := append([]fault{killSupervisor, stopSupervisor, killChild, killWaiter}, postgresFaults(pg)...)
	h.chaos(max(duration(t)/2, 10*time.Second), kinds, exactCrashes)
}

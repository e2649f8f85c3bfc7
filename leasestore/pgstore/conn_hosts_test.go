package pgstore

import (
	"net"
	"strconv"
	"testing"

	"github.com/leasectl/leasectl/internal/faultproxy"
	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// standby starts a server that target_session_attrs=read-write refuses,
// as it refuses a standby: its sessions are read-only. It takes the
// password of primary's superuser, so that a client of both gets as far
// as asking.
func standby(t *testing.T, primary *pgtest.Server) *pgtest.Server {
	t.Helper()
	srv := ownPG(t)
	role := pgtest.QuoteIdent(pgtest.Superuser)
	execSQL(t, srv, "ALTER ROLE "+role+" SET default_transaction_read_only = on; ALTER ROLE "+role+" PASSWORD "+pgtest.QuoteLiteral(primary.Password))
	return srv
}

// multiHost is a URL of the hosts first (host:port each) with
// target_session_attrs=read-write, with primary's superuser.
func multiHost(primary *pgtest.Server, first string) string {
	return "postgres://" + pgtest.Superuser + ":" + primary.Password + "@" + first + "," +
		net.JoinHostPort(primary.Host, strconv.Itoa(primary.Port)) + "/postgres?sslmode=disable&target_session_attrs=read-write"
}

// TestMultiHostURLWithASilentHost lists a standby first in a multi-host URL
// and makes it silent, frozen (SIGSTOP) or blackholed (a proxy that stops
// forwarding without closing): runs ride it out (storetest.RideOutSilence),
// their new connections going on to the primary within the hedge bound.
func TestMultiHostURLWithASilentHost(t *testing.T) {
	for _, fault := range []string{"frozen", "blackholed"} {
		t.Run(fault, func(t *testing.T) {
			t.Setenv("XDG_STATE_HOME", t.TempDir()) // the notes of silent hosts
			primary := testPG.Get(t)
			sb := standby(t, primary)
			first := net.JoinHostPort(sb.Host, strconv.Itoa(sb.Port))
			silence := func() {
				if err := sb.Freeze(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { sb.Thaw() })
			}
			if fault == "blackholed" {
				proxy, err := faultproxy.Start(first)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { proxy.Close() })
				first = proxy.Addr()
				silence = func() { proxy.Set(faultproxy.DropBoth) }
			}
			url, ns := multiHost(primary, first), freshNamespace()
			storetest.RideOutSilence(t, func(t *testing.T) leasestore.Driver { return openPG(t, url, ns) }, silence)
		})
	}
}

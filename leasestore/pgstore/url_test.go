package pgstore

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

func TestOpenRefusesBadURLsWithoutShowingThePassword(t *testing.T) {
	const password = "inv4lid-Pa55"
	for _, url := range []string{
		"postgres://u:" + password + "@127.0.0.1:notaport/db",
		"postgres://u:" + password + "@127.0.0.1:1/db?sslmode=sometimes",
		"postgres://u:" + password + "@127.0.0.1:1/db?connect_timeout=soon",
		"redis://u:" + password + "@127.0.0.1:1/0",
	} {
		_, err := Open(url, "ns")
		var urlErr *leasestore.URLError
		if !errors.As(err, &urlErr) {
			t.Errorf("Open(%s) = %v, want a *URLError", leasestore.Redact(url), err)
			continue
		}
		t.Logf("%s", err)
		if strings.Contains(err.Error(), password) {
			t.Errorf("Open error %q reveals the password", err)
		}
	}
}

func TestOpenIsRegisteredForBothSchemes(t *testing.T) {
	for _, scheme := range []string{"postgres", "postgresql"} {
		s, err := leasestore.Open(t.Context(), scheme+"://u@127.0.0.1:1/db", "ns")
		if err != nil {
			t.Errorf("leasestore.Open(%s://...): %v", scheme, err)
			continue
		}
		if _, ok := s.Driver().(*Store); !ok {
			t.Errorf("leasestore.Open(%s://...) = %T, want a *pgstore.Store", scheme, s)
		}
		s.Close()
	}
}

func TestNamespacesMapToSchemas(t *testing.T) {
	if _, err := Open("postgres://u@127.0.0.1:1/db", "pg_jobs"); err == nil {
		t.Error("Open accepted namespace pg_jobs, a schema name PostgreSQL reserves")
	}
	long := strings.Repeat("n", 64)
	for ns, want := range map[string]string{
		"leasectl":                    "leasectl",
		"Team/nightly@eu+1":           "Team/nightly@eu+1",
		strings.Repeat("n", 63):       strings.Repeat("n", 63),
		long:                          strings.Repeat("n", 46) + "~",
		strings.Repeat("n", 63) + "m": strings.Repeat("n", 46) + "~",
	} {
		got := schemaName(ns)
		if !strings.HasPrefix(got, want) || len(got) > maxIdentLen {
			t.Errorf("schemaName(%q) = %q, want %q... within %d bytes", ns, got, want, maxIdentLen)
		}
	}
	if schemaName(long) == schemaName(strings.Repeat("n", 63)+"m") {
		t.Error("two long namespaces share a schema")
	}
}

// TestNamespacesStayApart runs jobs of the same name in namespaces that
// differ in case, hold every namespace character, and are too long for an
// identifier: each is a schema of its own.
func TestNamespacesStayApart(t *testing.T) {
	srv := testPG.Get(t)
	for _, ns := range []string{"Apart/Ns:1@x+y=z.w_v-u", "apart/ns:1@x+y=z.w_v-u", strings.Repeat("a", 64), strings.Repeat("a", 63) + "b"} {
		s := openPG(t, srv.URL, ns)
		storetest.Acquire(t, s, storetest.Request("job", "w-"+ns, storetest.LongTTL))
	}
}

func TestPasswordFromTheEnvironmentAndPgpass(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	migrated(t, srv, ns)
	const password = "env-Pa55'word"
	role(t, srv, "envuser", password, "GRANT USAGE ON SCHEMA "+quoteIdent(ns)+" TO envuser")
	noPassword := srv.URLFor("envuser", "", "postgres")

	t.Run("PGPASSWORD", func(t *testing.T) {
		t.Setenv("PGPASSWORD", password)
		storetest.Acquire(t, openPG(t, noPassword, ns), storetest.Request("env", "w1", storetest.LongTTL))
	})
	t.Run("pgpass file", func(t *testing.T) {
		file := filepath.Join(t.TempDir(), "pgpass")
		line := strings.Join([]string{srv.Host, itoa(srv.Port), "postgres", "envuser", strings.ReplaceAll(password, ":", `\:`)}, ":")
		if err := os.WriteFile(file, []byte(line+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("PGPASSWORD", "")
		t.Setenv("PGPASSFILE", file)
		storetest.Acquire(t, openPG(t, noPassword, ns), storetest.Request("pgpass", "w1", storetest.LongTTL))
	})
	t.Run("wrong password", func(t *testing.T) {
		t.Setenv("PGPASSWORD", "wr0ng-Pa55")
		_, err := openPG(t, noPassword, ns).Acquire(pgCall(t, storetest.HangGuard), storetest.Request("env", "w2", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "refused the credentials", "wr0ng-Pa55", password)
	})
	t.Run("wrong password in the URL", func(t *testing.T) {
		_, err := openPG(t, srv.URLFor("envuser", "wr0ng-Pa55", "postgres"), ns).Acquire(pgCall(t, storetest.HangGuard),
			storetest.Request("env", "w2", storetest.LongTTL))
		storetest.WantUnavailable(t, err, "refused the credentials", "wr0ng-Pa55")
	})
}

func TestTLSRequiredByTheURL(t *testing.T) {
	srv := testPG.Get(t)
	url := strings.Replace(srv.URLFor("postgres", srv.Password, "postgres"), "sslmode=disable", "sslmode=require", 1)
	_, err := openPG(t, url, freshNamespace()).Acquire(pgCall(t, storetest.HangGuard), storetest.Request("job", "w1", storetest.LongTTL))
	storetest.WantUnavailable(t, err, "PostgreSQL at "+srv.Host, srv.Password)
	if !strings.Contains(err.Error(), "TLS") && !strings.Contains(err.Error(), "SSL") {
		t.Errorf("error %q does not say that TLS was refused", err)
	}
}

package pgtest

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/internal/testserver"
)

func start(t *testing.T, opts Options) *Server {
	t.Helper()
	s, err := Start(opts)
	return testserver.Own(t, s, err)
}

func query1(t *testing.T, s *Server, sql string) string {
	t.Helper()
	rows, err := s.Query(sql)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 1 || len(rows[0]) != 1 {
		t.Fatalf("%s: rows %q, want one value", sql, rows)
	}
	return rows[0][0]
}

func TestStartQueryRestartStop(t *testing.T) {
	s := start(t, Options{Conf: []string{"work_mem=7MB"}})
	if s.Port == 5432 {
		t.Fatal("server on the machine's PostgreSQL port 5432")
	}
	if got := query1(t, s, "SHOW listen_addresses"); got != "127.0.0.1" {
		t.Errorf("listen_addresses = %q, want 127.0.0.1 only", got)
	}
	if got := query1(t, s, "SHOW unix_socket_directories"); !strings.HasPrefix(got, os.TempDir()) {
		t.Errorf("unix_socket_directories = %q, want a folder of the server's own", got)
	}
	if got := query1(t, s, "SHOW work_mem"); got != "7MB" {
		t.Errorf("work_mem = %q, want Options.Conf's 7MB", got)
	}
	if got := query1(t, s, "SELECT current_setting('fsync')"); got != "off" {
		t.Errorf("fsync = %q, want off", got)
	}
	if err := s.Exec("CREATE TABLE t (v text); INSERT INTO t VALUES ('kept')"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Query("SELECT no_such_column FROM t"); err == nil {
		t.Error("a bad query gave no error")
	}
	if os.Geteuid() == 0 {
		if got := query1(t, s, "SELECT pg_catalog.current_setting('data_directory')"); got == "" {
			t.Error("no data directory")
		}
		st, err := os.Stat(s.dataDir())
		if err != nil {
			t.Fatal(err)
		}
		if uid := st.Sys().(*syscall.Stat_t).Uid; uid == 0 {
			t.Error("running as root, the data folder is root's: the server must run as another user")
		}
	}

	port := s.Port
	if err := s.Restart(); err != nil {
		t.Fatal(err)
	}
	if s.Port != port {
		t.Fatalf("Restart moved the server from port %d to %d", port, s.Port)
	}
	if got := query1(t, s, "SELECT v FROM t"); got != "kept" {
		t.Fatalf("after Restart: %q, want the committed row kept", got)
	}
	if err := s.Stop(); err != nil {
		t.Fatal(err)
	}
	if c, err := net.DialTimeout("tcp", net.JoinHostPort(s.Host, strconv.Itoa(port)), time.Second); err == nil {
		c.Close()
		t.Fatal("server still accepts connections after Stop")
	}
	if _, err := os.Stat(s.dir); !os.IsNotExist(err) {
		t.Fatalf("folder %s left after Stop: %v", s.dir, err)
	}
}

func TestFreezeStopsTheBackendsToo(t *testing.T) {
	s := start(t, Options{})
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, s.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	if err := s.Freeze(); err != nil {
		t.Fatal(err)
	}
	// The connection's backend is frozen with the postmaster: a query on it
	// gets no answer before its deadline.
	qctx, qcancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer qcancel()
	if _, err := conn.Exec(qctx, "SELECT 1").ReadAll(); err == nil {
		t.Fatal("a frozen server answered")
	}
	if err := s.Thaw(); err != nil {
		t.Fatal(err)
	}
	if got := query1(t, s, "SELECT 1"); got != "1" {
		t.Fatalf("after Thaw: %q", got)
	}
}

func TestURLForQuotesCredentials(t *testing.T) {
	s := &Server{Host: "127.0.0.1", Port: 1}
	got := s.URLFor("a user", "p@ss:w/rd", "db")
	want := "postgres://a%20user:p%40ss%3Aw%2Frd@127.0.0.1:1/db?sslmode=disable"
	if got != want {
		t.Errorf("URLFor = %s, want %s", got, want)
	}
}

func TestPgBouncerPoolsTransactions(t *testing.T) {
	s := start(t, Options{})
	b, err := s.StartPgBouncer()
	if errors.Is(err, ErrNoPgBouncer) {
		t.Skip(err)
	}
	if err != nil {
		t.Fatal(err)
	}
	defer b.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, b.URL)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	res, err := conn.Exec(ctx, "SHOW application_name; SELECT current_setting('port')").ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if got := string(res[len(res)-1].Rows[0][0]); got != strconv.Itoa(s.Port) {
		t.Errorf("through pgbouncer: server port %s, want %d", got, s.Port)
	}
}

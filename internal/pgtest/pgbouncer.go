package pgtest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/internal/testproc"
)

// PgBouncer is a PgBouncer in transaction pooling mode in front of a test
// server, started by Server.StartPgBouncer.
type PgBouncer struct {
	// URL connects through it as the server's superuser, with the same
	// password, to the postgres database.
	URL string

	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// ErrNoPgBouncer is returned by StartPgBouncer when pgbouncer is not
// installed (Debian's pgbouncer package); callers skip what needs it.
var ErrNoPgBouncer = errors.New("pgtest: pgbouncer is not installed (apt-get install pgbouncer)")

// StartPgBouncer starts a PgBouncer on a free loopback port that pools the
// server's connections per transaction, authenticating clients with the
// superuser's SCRAM secret, as a production PgBouncer would. The caller
// must Stop it before the server.
func (s *Server) StartPgBouncer() (*PgBouncer, error) {
	bin, err := exec.LookPath("pgbouncer")
	if err != nil {
		return nil, ErrNoPgBouncer
	}
	rows, err := s.Query("SELECT rolpassword FROM pg_authid WHERE rolname = " + QuoteLiteral(Superuser))
	if err != nil || len(rows) != 1 {
		return nil, fmt.Errorf("pgtest: the superuser's SCRAM secret: %v", err)
	}
	dir, err := os.MkdirTemp("", "pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: temp dir: %w", err)
	}
	port, err := testproc.FreePort()
	if err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	b := &PgBouncer{dir: dir, done: make(chan struct{})}
	files := map[string]string{
		"userlist.txt": fmt.Sprintf("%q %q\n", Superuser, rows[0][0]),
		"pgbouncer.ini": fmt.Sprintf(`[databases]
postgres = host=%s port=%d dbname=postgres
[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir = %s
auth_type = scram-sha-256
auth_file = %s
pool_mode = transaction
max_client_conn = 500
default_pool_size = 10
logfile = %s
`, s.Host, s.Port, port, dir, filepath.Join(dir, "userlist.txt"), filepath.Join(dir, "pgbouncer.log")),
	}
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: %w", err)
		}
		if err := s.own(path); err != nil {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("pgtest: chown %s: %w", path, err)
		}
	}
	if err := s.own(dir); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: chown %s: %w", dir, err)
	}
	// PgBouncer, like PostgreSQL, refuses to run as root.
	b.cmd = exec.Command(bin, filepath.Join(dir, "pgbouncer.ini"))
	b.cmd.Dir = dir
	b.cmd.SysProcAttr = procAttr()
	b.cmd.SysProcAttr.Credential = s.cred
	if err := b.cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("pgtest: start pgbouncer: %w", err)
	}
	go func() {
		b.cmd.Wait()
		close(b.done)
	}()
	u := &url.URL{Scheme: "postgres", Host: net.JoinHostPort("127.0.0.1", strconv.Itoa(port)), Path: "/postgres",
		User: url.UserPassword(Superuser, s.Password), RawQuery: "sslmode=disable"}
	b.URL = u.String()
	if err := b.waitReady(); err != nil {
		b.Stop()
		return nil, err
	}
	return b, nil
}

// waitReady runs a query through the pooler until it answers.
func (b *PgBouncer) waitReady() error {
	err := testproc.WaitReady("pgtest: pgbouncer", b.done, readyTimeout, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgconn.Connect(ctx, b.URL)
		if err != nil {
			return err
		}
		defer conn.Close(context.Background())
		_, err = conn.Exec(ctx, "SELECT 1").ReadAll()
		return err
	})
	if err != nil {
		return fmt.Errorf("%w; pgbouncer log: %s", err, testproc.Tail(filepath.Join(b.dir, "pgbouncer.log")))
	}
	return nil
}

// Stop ends the pooler and removes its folder.
func (b *PgBouncer) Stop() error {
	testproc.Stop(b.cmd.Process, b.done, syscall.SIGINT, stopTimeout)
	return os.RemoveAll(b.dir)
}

// Package pgtest starts throw-away PostgreSQL servers for tests: each made
// by initdb in a temporary folder of its own, listening only on 127.0.0.1
// on a free port and on a socket folder of its own, without fsync. It never
// touches a PostgreSQL it did not start (and never port 5432). When the
// tests run as root, the server runs as the postgres system user, which
// PostgreSQL requires. It is imported only by tests and the bench.
package pgtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/internal/testproc"
)

// readyTimeout bounds how long Start and Restart wait for the server to
// accept connections; a loaded 2-core machine can take a while to run
// initdb and crash recovery.
const readyTimeout = 30 * time.Second

// stopTimeout is how long Stop waits after a fast shutdown before it
// SIGKILLs the server's processes.
const stopTimeout = 10 * time.Second

// ioTimeout bounds every statement Exec and Query send, so that a frozen
// server cannot hang a test.
const ioTimeout = 10 * time.Second

// Superuser is the name of every test server's superuser.
const Superuser = "postgres"

// Options configure a test server.
type Options struct {
	// Conf are extra server settings as name=value, each passed as -c.
	Conf []string
	// TLS: the server also speaks TLS, with a certificate for 127.0.0.1
	// signed by Server.CA. Clients still choose (sslmode).
	TLS bool
}

// Server is a running PostgreSQL started by Start.
type Server struct {
	Host     string // 127.0.0.1
	Port     int
	Password string // the superuser's
	// URL connects as the superuser to the postgres database, without TLS.
	URL string
	// SocketDir is the folder of the server's Unix socket, where local
	// connections need no password.
	SocketDir string
	// CA is the file of the certificate that signed the server's, with
	// Options.TLS.
	CA string

	opts Options
	bin  string // folder of initdb and postgres
	dir  string // the server's folder: data, socket folder, log
	cred *syscall.Credential
	cmd  *exec.Cmd
	done <-chan struct{} // closed when cmd has been waited for
	cert testcert.Files  // with Options.TLS
}

// Start runs initdb in a new temporary folder and starts a server on a free
// loopback port, returning once it accepts connections. The caller must
// Stop it.
func Start(opts Options) (*Server, error) {
	bin, err := binDir()
	if err != nil {
		return nil, err
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "pgtest-")
	if err != nil {
		return nil, fmt.Errorf("pgtest: temp dir: %w", err)
	}
	s := &Server{Host: "127.0.0.1", opts: opts, bin: bin, dir: dir, cred: cred}
	s.SocketDir = s.socketDir()
	if err := s.initdb(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if s.Port, err = testproc.FreePort(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	s.URL = s.URLFor(Superuser, s.Password, "postgres")
	if err := s.launch(); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	return s, nil
}

// binDir finds the folder of initdb and postgres: the newest of Debian's
// /usr/lib/postgresql/*/bin, else the folder of initdb on PATH.
func binDir() (string, error) {
	dirs, _ := filepath.Glob("/usr/lib/postgresql/*/bin")
	slices.SortFunc(dirs, func(a, b string) int { return majorOf(b) - majorOf(a) })
	for _, d := range dirs {
		if _, err := os.Stat(filepath.Join(d, "postgres")); err == nil {
			return d, nil
		}
	}
	initdb, err := exec.LookPath("initdb")
	if err != nil {
		return "", errors.New("pgtest: initdb not found: run make deps (Debian's postgresql package)")
	}
	return filepath.Dir(initdb), nil
}

// majorOf is the major version in a /usr/lib/postgresql/N/bin path.
func majorOf(dir string) int {
	n, _ := strconv.Atoi(filepath.Base(filepath.Dir(dir)))
	return n
}

// credential is who the server runs as: nil (the tests' own user) unless
// the tests run as root, which PostgreSQL refuses; then the postgres system
// user that Debian's package creates.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, errors.New("pgtest: running as root, and there is no postgres user to run the server as (install Debian's postgresql package, or run the tests as another user)")
	}
	uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
	gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
	if err1 != nil || err2 != nil {
		return nil, fmt.Errorf("pgtest: postgres user has uid %q gid %q", u.Uid, u.Gid)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

// own gives path to the user the server runs as.
func (s *Server) own(path string) error {
	if s.cred == nil {
		return nil
	}
	return os.Chown(path, int(s.cred.Uid), int(s.cred.Gid))
}

// command is a command of the server's binaries, run as the server's user.
func (s *Server) command(name string, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(s.bin, name), args...)
	cmd.Dir = s.dir
	cmd.SysProcAttr = procAttr()
	cmd.SysProcAttr.Credential = s.cred
	return cmd
}

// initdb makes the data folder, with a random superuser password and
// password authentication (SCRAM) on TCP.
func (s *Server) initdb() error {
	if err := s.own(s.dir); err != nil {
		return fmt.Errorf("pgtest: chown %s: %w", s.dir, err)
	}
	var pw [12]byte
	rand.Read(pw[:])
	s.Password = hex.EncodeToString(pw[:])
	pwFile := filepath.Join(s.dir, "pwfile")
	if err := os.WriteFile(pwFile, []byte(s.Password+"\n"), 0o600); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := s.own(pwFile); err != nil {
		return fmt.Errorf("pgtest: chown %s: %w", pwFile, err)
	}
	cmd := s.command("initdb", "-D", s.dataDir(), "-U", Superuser, "--pwfile", pwFile,
		"--auth-host=scram-sha-256", "--auth-local=trust", "-E", "UTF8", "--locale=C", "--no-sync")
	out, err := cmd.CombinedOutput()
	os.Remove(pwFile)
	if err != nil {
		return fmt.Errorf("pgtest: initdb: %v: %s", err, testproc.LastLines(string(out)))
	}
	sock := s.socketDir()
	if err := os.Mkdir(sock, 0o700); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	if err := s.own(sock); err != nil {
		return fmt.Errorf("pgtest: chown %s: %w", sock, err)
	}
	if s.opts.TLS {
		return s.makeCertificates()
	}
	return nil
}

// makeCertificates writes the server's certificate and key where the
// server, which refuses a key others can read, reads them.
func (s *Server) makeCertificates() error {
	dir := filepath.Join(s.dir, "tls")
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("pgtest: %w", err)
	}
	files, err := testcert.Generate(dir)
	if err != nil {
		return fmt.Errorf("pgtest: certificates: %w", err)
	}
	s.cert, s.CA = files, files.CA
	for _, path := range []string{dir, files.ServerCert, files.ServerKey} {
		if err := s.own(path); err != nil {
			return fmt.Errorf("pgtest: chown %s: %w", path, err)
		}
	}
	return os.Chmod(files.ServerKey, 0o600)
}

func (s *Server) dataDir() string   { return filepath.Join(s.dir, "data") }
func (s *Server) socketDir() string { return filepath.Join(s.dir, "sock") }
func (s *Server) logPath() string   { return filepath.Join(s.dir, "postgres.log") }

// launch starts postgres on s.Port and waits until it accepts connections.
func (s *Server) launch() error {
	args := []string{
		"-D", s.dataDir(),
		"-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "unix_socket_directories=" + s.socketDir(),
		"-c", "fsync=off",
		"-c", "full_page_writes=off",
		"-c", "shared_buffers=32MB",
		"-c", "max_connections=150",
		"-c", "logging_collector=off",
	}
	if s.opts.TLS {
		args = append(args, "-c", "ssl=on",
			"-c", "ssl_cert_file="+s.cert.ServerCert, "-c", "ssl_key_file="+s.cert.ServerKey)
	}
	for _, c := range s.opts.Conf {
		args = append(args, "-c", c)
	}
	cmd := s.command("postgres", args...)
	done, err := testproc.Launch(cmd, s.logPath())
	if err != nil {
		return fmt.Errorf("pgtest: start postgres: %w", err)
	}
	s.cmd, s.done = cmd, done
	if err := s.waitReady(); err != nil {
		s.Kill()
		return fmt.Errorf("%w; postgres log: %s", err, testproc.Tail(s.logPath()))
	}
	return nil
}

// waitReady connects until the server accepts a connection, the postmaster
// exits, or readyTimeout passes.
func (s *Server) waitReady() error {
	what := fmt.Sprintf("pgtest: postgres on port %d", s.Port)
	return testproc.WaitReady(what, s.done, readyTimeout, 20*time.Millisecond, func() error {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		conn, err := pgconn.Connect(ctx, s.URL)
		if err != nil {
			return err
		}
		conn.Close(context.Background())
		return nil
	})
}

// URLFor is a URL of the server for user with password (none when empty)
// and database db, without TLS.
func (s *Server) URLFor(user, password, db string) string {
	return s.urlFor(user, password, db, "disable")
}

// PreferURL is URL with sslmode=prefer, libpq's default: TLS if the server
// offers it, else plain text.
func (s *Server) PreferURL() string {
	return s.urlFor(Superuser, s.Password, "postgres", "prefer")
}

func (s *Server) urlFor(user, password, db, sslmode string) string {
	u := &url.URL{Scheme: "postgres", Host: net.JoinHostPort(s.Host, strconv.Itoa(s.Port)), Path: "/" + db,
		RawQuery: "sslmode=" + sslmode}
	if password != "" {
		u.User = url.UserPassword(user, password)
	} else {
		u.User = url.User(user)
	}
	return u.String()
}

// signalAll sends sig to the postmaster and to every process it started.
// Each backend leads a session of its own, so there is no group to signal.
// The postmaster is stopped first, so that it forks no process in between,
// and resumed last.
func (s *Server) signalAll(sig syscall.Signal) error {
	pid := s.cmd.Process.Pid
	if sig != syscall.SIGCONT {
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			return err
		}
	}
	for _, kid := range childrenOf(pid) {
		if sig == syscall.SIGSTOP {
			testproc.Freeze(kid)
		} else {
			syscall.Kill(kid, sig)
		}
	}
	if sig == syscall.SIGSTOP {
		return testproc.Freeze(pid)
	}
	if err := syscall.Kill(pid, sig); err != nil {
		return err
	}
	if sig != syscall.SIGCONT {
		syscall.Kill(pid, syscall.SIGCONT)
	}
	return nil
}

// exited reports whether the postmaster has exited.
func (s *Server) exited() bool { return testproc.Exited(s.done) }

// Stop shuts the server down (fast shutdown, then SIGKILL if it lingers)
// and removes its folder. It thaws a frozen server first.
func (s *Server) Stop() error {
	if !s.exited() {
		s.signalAll(syscall.SIGCONT)
		s.cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-s.done:
		case <-time.After(stopTimeout):
			s.Kill()
		}
	}
	if err := os.RemoveAll(s.dir); err != nil {
		return fmt.Errorf("pgtest: remove %s: %w", s.dir, err)
	}
	return nil
}

// Kill SIGKILLs the postmaster and every process it started, as a crash
// would, and waits until they are gone, so that a new postmaster finds none
// of them attached to its shared memory. The data folder stays for Restart.
func (s *Server) Kill() error {
	if s.exited() {
		return nil
	}
	kids := childrenOf(s.cmd.Process.Pid)
	if err := s.signalAll(syscall.SIGKILL); err != nil {
		return fmt.Errorf("pgtest: kill postgres: %w", err)
	}
	<-s.done
	deadline := time.Now().Add(stopTimeout)
	for _, kid := range kids {
		for syscall.Kill(kid, 0) == nil {
			if time.Now().After(deadline) {
				return fmt.Errorf("pgtest: postgres process %d still alive %s after SIGKILL", kid, stopTimeout)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// Restart kills the server and starts it again on the same port and data,
// which it recovers from its write-ahead log, as after a crash. Every
// connection is lost; committed data is kept.
func (s *Server) Restart() error {
	if err := s.Kill(); err != nil {
		return err
	}
	return s.launch()
}

// Freeze stops the postmaster and every backend with SIGSTOP: connections
// stay open, nothing answers, as with a network partition or a long pause.
func (s *Server) Freeze() error {
	if err := s.signalAll(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("pgtest: freeze postgres: %w", err)
	}
	return nil
}

// Thaw resumes a frozen server with SIGCONT.
func (s *Server) Thaw() error {
	if err := s.signalAll(syscall.SIGCONT); err != nil {
		return fmt.Errorf("pgtest: thaw postgres: %w", err)
	}
	return nil
}

// Exec runs sql, one or more statements, as the superuser in the postgres
// database.
func (s *Server) Exec(sql string) error {
	_, err := s.Query(sql)
	return err
}

// Query runs sql as the superuser in the postgres database and returns the
// rows of its last statement, every value as text ("" for NULL).
func (s *Server) Query(sql string) ([][]string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), ioTimeout)
	defer cancel()
	conn, err := pgconn.Connect(ctx, s.URL)
	if err != nil {
		return nil, fmt.Errorf("pgtest: connect: %w", err)
	}
	defer conn.Close(context.Background())
	results, err := conn.Exec(ctx, sql).ReadAll()
	if err != nil {
		return nil, fmt.Errorf("pgtest: %s: %w", firstLine(sql), err)
	}
	if len(results) == 0 {
		return nil, nil
	}
	last := results[len(results)-1]
	rows := make([][]string, len(last.Rows))
	for i, r := range last.Rows {
		rows[i] = make([]string, len(r))
		for j, v := range r {
			rows[i][j] = string(v)
		}
	}
	return rows, nil
}

// QuoteLiteral quotes s as an SQL string literal.
func QuoteLiteral(s string) string {
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// QuoteIdent quotes s as an SQL identifier.
func QuoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func firstLine(s string) string {
	line, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return line
}

package fence

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// pgReadyTimeout bounds initdb and the server's start-up on a loaded
// machine.
const pgReadyTimeout = 60 * time.Second

// fencingSQL returns the SQL blocks of docs/fencing.md, in order.
func fencingSQL(t *testing.T) []string {
	t.Helper()
	doc, err := os.ReadFile("../docs/fencing.md")
	if err != nil {
		t.Fatal(err)
	}
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```sql\n(.*?)```").FindAllStringSubmatch(string(doc), -1) {
		blocks = append(blocks, strings.TrimSpace(m[1]))
	}
	return blocks
}

// postgres is a PostgreSQL server a test started in a folder of its own.
type postgres struct {
	dir  string
	port int
	cmd  *exec.Cmd
}

// startPostgres starts a PostgreSQL server on a free loopback port, as the
// postgres user when the test runs as root (the server refuses root), and
// stops it when the test ends. It skips the test when PostgreSQL is not
// installed.
func startPostgres(t *testing.T) *postgres {
	t.Helper()
	for _, bin := range []string{"initdb", "postgres", "psql"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s is not installed (Debian: postgresql, postgresql-client): the SQL of docs/fencing.md is not tested", bin)
		}
	}
	root, err := os.MkdirTemp("", "fence-pg-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(root) })
	if err := os.Chmod(root, 0o755); err != nil {
		t.Fatal(err)
	}
	pg := &postgres{dir: filepath.Join(root, "data"), port: freePort(t)}
	if err := os.Mkdir(pg.dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			t.Skipf("running as root and no postgres user to run PostgreSQL as: %v", err)
		}
		if out, err := exec.Command("chown", u.Username+":", pg.dir).CombinedOutput(); err != nil {
			t.Fatalf("chown: %v\n%s", err, out)
		}
	}
	if out, err := pg.command("initdb", "-D", pg.dir, "-U", "postgres", "--auth=trust", "--no-sync").CombinedOutput(); err != nil {
		t.Fatalf("initdb: %v\n%s", err, out)
	}
	pg.cmd = pg.command("postgres", "-D", pg.dir, "-p", fmt.Sprint(pg.port), "-k", pg.dir,
		"-c", "listen_addresses=127.0.0.1", "-c", "fsync=off")
	log, err := os.Create(filepath.Join(root, "postgres.log"))
	if err != nil {
		t.Fatal(err)
	}
	pg.cmd.Stdout, pg.cmd.Stderr = log, log
	if err := pg.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = pg.cmd.Process.Signal(os.Interrupt) // fast shutdown
		_ = pg.cmd.Wait()
		_ = log.Close()
	})
	for deadline := time.Now().Add(pgReadyTimeout); ; {
		if _, err := pg.psql("SELECT 1"); err == nil {
			return pg
		}
		if time.Now().After(deadline) {
			logText, _ := os.ReadFile(log.Name())
			t.Fatalf("PostgreSQL did not answer within %s:\n%s", pgReadyTimeout, logText)
		}
		time.Sleep(50 * time.Millisecond) // polls the server's readiness, which has no event to await
	}
}

// command is name with args, run as the postgres user when the test runs
// as root.
func (pg *postgres) command(name string, args ...string) *exec.Cmd {
	if os.Geteuid() == 0 {
		return exec.Command("setpriv", append([]string{"--reuid=postgres", "--regid=postgres", "--init-groups", name}, args...)...)
	}
	return exec.Command(name, args...)
}

// psqlArgs are the arguments that connect psql to the server, quietly,
// stopping at the first error.
func (pg *postgres) psqlArgs() []string {
	return []string{"-h", "127.0.0.1", "-p", fmt.Sprint(pg.port), "-U", "postgres", "-d", "postgres",
		"-X", "-q", "-v", "ON_ERROR_STOP=1", "--no-align", "--tuples-only"}
}

// psql runs sql in one session and returns its output.
func (pg *postgres) psql(sql string) (string, error) {
	out, err := exec.Command("psql", append(pg.psqlArgs(), "-c", sql)...).CombinedOutput()
	if err != nil {
		return "", fmt.Errorf("psql: %v\n%s", err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// freePort returns a loopback TCP port nobody listens on.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// returned prepares a statement and executes it in one session, and
// returns what it printed.
func (pg *postgres) returned(t *testing.T, prepare, execute string) string {
	t.Helper()
	out, err := pg.psql(prepare + "; " + execute)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The SQL of docs/fencing.md, as written, against a real PostgreSQL.
func TestFencingSQLOnPostgres(t *testing.T) {
	blocks := fencingSQL(t)
	var creates []string
	var writeReport, claim string
	for _, b := range blocks {
		switch {
		case strings.HasPrefix(b, "CREATE TABLE"):
			creates = append(creates, b)
		case strings.HasPrefix(b, "INSERT INTO reports"):
			writeReport = b
		case strings.HasPrefix(b, "INSERT INTO job_fences"):
			claim = b
		}
	}
	if len(creates) != 2 || writeReport == "" || claim == "" {
		t.Fatalf("docs/fencing.md lost its SQL: %d CREATE TABLE, upsert %q, claim %q", len(creates), writeReport, claim)
	}
	pg := startPostgres(t)
	if _, err := pg.psql(strings.Join(creates, "\n")); err != nil {
		t.Fatal(err)
	}
	// Each statement is prepared with its $n parameters, and prints a 1 for
	// each row it wrote (RETURNING 1).
	prepareWrite := "PREPARE write_report(text, text, bigint) AS " + strings.TrimSuffix(writeReport, ";") + " RETURNING 1"
	prepareClaim := "PREPARE claim(text, bigint) AS " + strings.TrimSuffix(claim, ";") + " RETURNING 1"
	write := func(id, body string, token int64) bool {
		out := pg.returned(t, prepareWrite, fmt.Sprintf("EXECUTE write_report('%s', '%s', %d)", id, body, token))
		return out == "1"
	}

	t.Run("row carries its writer's token", func(t *testing.T) {
		for _, step := range []struct {
			body  string
			token int64
			want  bool
		}{
			{"first run", 1767225600000000, true},
			{"first run, again", 1767225600000000, true},
			{"second run", 1767225700000000, true},
			{"zombie of the first run", 1767225600000000, false},
		} {
			if got := write("nightly", step.body, step.token); got != step.want {
				t.Errorf("write %q with token %d: written %v, want %v", step.body, step.token, got, step.want)
			}
		}
		body, err := pg.psql("SELECT body || ' ' || fencing_token FROM reports WHERE id = 'nightly'")
		if err != nil {
			t.Fatal(err)
		}
		if body != "second run 1767225700000000" {
			t.Errorf("row %q, want the second run's", body)
		}
	})

	t.Run("an older claim waits and then writes nothing", func(t *testing.T) {
		newer := pg.session(t)
		newer.send(t, prepareClaim+";")
		newer.send(t, "BEGIN;")
		if got := newer.send(t, "EXECUTE claim('nightly', 1767225700000000);"); got != "1" {
			t.Fatalf("the newer run's claim wrote %q rows, want 1", got)
		}
		older := exec.Command("psql", append(pg.psqlArgs(), "-c", prepareClaim+"; EXECUTE claim('nightly', 1767225600000000)")...)
		result := make(chan string, 1)
		go func() {
			out, err := older.CombinedOutput()
			if err != nil {
				result <- fmt.Sprintf("error %v: %s", err, out)
				return
			}
			result <- strings.TrimSpace(string(out))
		}()
		// The older claim must be waiting for the newer transaction's row lock.
		for {
			waiting, err := pg.psql("SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'")
			if err != nil {
				t.Fatal(err)
			}
			if waiting == "1" {
				break
			}
			select {
			case out := <-result:
				t.Fatalf("the older claim did not wait for the newer transaction: %q", out)
			default:
			}
		}
		newer.send(t, "COMMIT;")
		select {
		case out := <-result:
			if out != "" {
				t.Errorf("the older claim after the newer commit returned %q, want no row", out)
			}
		case <-time.After(hangGuard):
			t.Fatal("the older claim still waits after the newer transaction committed")
		}
		token, err := pg.psql("SELECT token FROM job_fences WHERE job = 'nightly'")
		if err != nil || token != "1767225700000000" {
			t.Errorf("fence row token %q (%v), want the newer run's", token, err)
		}
	})
}

// session is an interactive psql whose statements a test sends one by one.
type session struct {
	in  io.WriteCloser
	out *bufio.Reader
}

// session starts a psql session, ended when the test ends.
func (pg *postgres) session(t *testing.T) *session {
	t.Helper()
	cmd := exec.Command("psql", pg.psqlArgs()...)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = in.Close()
		_ = cmd.Wait()
	})
	return &session{in: in, out: bufio.NewReader(out)}
}

// send sends one statement and returns what it printed before a marker
// line that psql echoes once the statement is done.
func (s *session) send(t *testing.T, sql string) string {
	t.Helper()
	const marker = "--done--"
	if _, err := fmt.Fprintf(s.in, "%s\n\\echo %s\n", sql, marker); err != nil {
		t.Fatal(err)
	}
	var lines []string
	for {
		line, err := s.out.ReadString('\n')
		if err != nil {
			t.Fatalf("psql session ended: %v; output %q", err, lines)
		}
		line = strings.TrimSpace(line)
		if line == marker {
			return strings.Join(lines, "\n")
		}
		if line != "" {
			lines = append(lines, line)
		}
	}
}

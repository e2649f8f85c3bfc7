//go:build linux

package pgstore

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/internal/testenv"
)

// These tests drive the built binary, as a user would, against PostgreSQL
// servers the tests start, through the faults a run must ride out or fail
// fast on.

// Timing of the runs that must notice a frozen server: the supervisor
// tests' own.
const (
	ttl       = 2 * time.Second
	heartbeat = 300 * time.Millisecond
	safety    = time.Second
)

func timing(ttl, heartbeat, safety time.Duration) []string {
	return []string{"--ttl", ttl.String(), "--heartbeat", heartbeat.String(), "--safety", safety.String()}
}

// leasectl is a command running the binary against storeURL in namespace.
func leasectl(t *testing.T, storeURL, namespace string, args ...string) *exec.Cmd {
	t.Helper()
	cmd := testenv.Command(t, args...)
	cmd.Env = append(os.Environ(),
		"LEASECTL_STORE="+storeURL,
		"LEASECTL_NAMESPACE="+namespace,
		"LEASECTL_LOG_FORMAT=json",
		"XDG_STATE_HOME="+t.TempDir(),
	)
	return cmd
}

// running is a leasectl process whose child reports on stdout, one line per
// event, and waits for a line on its stdin before it ends.
type running struct {
	*testenv.Process
	stdin io.WriteCloser
}

func start(t *testing.T, cmd *exec.Cmd) *running {
	t.Helper()
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	return &running{testenv.Start(t, cmd), stdin}
}

// finish lets the child end and returns leasectl's exit code.
func (r *running) finish() int {
	io.WriteString(r.stdin, "go\n")
	return r.ExitCode()
}

// childScript reports the child's pid and token, then waits for a line on
// stdin.
const childScript = `echo pid $$; echo token $LEASECTL_FENCING_TOKEN; read x; echo ending`

// liveUntil reads job's liveness expiry in namespace from srv, in
// microseconds; 0 when it has no run.
func liveUntil(t *testing.T, srv *pgtest.Server, namespace, job string) int64 {
	t.Helper()
	rows, err := srv.Query(fmt.Sprintf("SELECT (extract(epoch FROM live_until) * 1000000)::bigint FROM %s.runs WHERE job = %s",
		quoteIdent(namespace), quoteLiteral(job)))
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) == 0 {
		return 0
	}
	n, _ := strconv.ParseInt(rows[0][0], 10, 64)
	return n
}

// awaitRenewal waits until job's liveness expiry in namespace moves past
// since: a renewal went through. The server is polled: a renewal leaves no
// other trace a test can wait on.
func awaitRenewal(t *testing.T, srv *pgtest.Server, namespace, job string, since int64) {
	t.Helper()
	deadline := time.Now().Add(testenv.HangGuard)
	for liveUntil(t, srv, namespace, job) <= since {
		if time.Now().After(deadline) {
			t.Fatalf("no renewal of %s within %s", job, testenv.HangGuard)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// lastOutcome reads the job's last outcome with `leasectl status --json`.
func lastOutcome(t *testing.T, url, namespace, job string) (result string, token int64) {
	t.Helper()
	code, out, _ := testenv.Run(t, leasectl(t, url, namespace, "status", job, "--json"))
	if code != 0 {
		t.Fatalf("status exit %d", code)
	}
	var st struct {
		LastOutcome *struct {
			Result string `json:"result"`
			Token  int64  `json:"token"`
		} `json:"last_outcome"`
	}
	if err := json.Unmarshal([]byte(out), &st); err != nil || st.LastOutcome == nil {
		t.Fatalf("status --json: %v\n%s", err, out)
	}
	return st.LastOutcome.Result, st.LastOutcome.Token
}

func TestRunOnPostgres(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	code, out, _ := testenv.Run(t, leasectl(t, srv.URL, ns, "store", "migrate"))
	if code != 0 || !strings.Contains(out, fmt.Sprintf("schema %q migrated from version 0 to %d", ns, schemaVersion)) {
		t.Fatalf("store migrate: exit %d, %q", code, out)
	}
	code, out, _ = testenv.Run(t, leasectl(t, srv.URL, ns, "store", "migrate", "--json"))
	if code != 0 || strings.TrimSpace(out) != fmt.Sprintf(`{"schema":%q,"from_version":%d,"to_version":%[2]d}`, ns, schemaVersion) {
		t.Fatalf("store migrate --json again: exit %d, %q", code, out)
	}
	code, out, _ = testenv.Run(t, leasectl(t, srv.URL, ns, "run", "--job", "hello", "--", "sh", "-c", `echo "token $LEASECTL_FENCING_TOKEN"`))
	if code != 0 || !strings.HasPrefix(out, "token ") {
		t.Fatalf("run: exit %d, stdout %q", code, out)
	}
	token, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimPrefix(out, "token ")), 10, 64)
	if result, last := lastOutcome(t, srv.URL, ns, "hello"); !strings.EqualFold(result, "completed") || last != token {
		t.Errorf("last outcome %s with token %d, want completed with the run's token %d", result, last, token)
	}
	if code, _, _ := testenv.Run(t, leasectl(t, srv.URL, ns, "token", "check", "--job", "hello", "--token", strconv.FormatInt(token, 10))); code != 1 {
		t.Errorf("token check of a finished run: exit %d, want 1", code)
	}
}

func TestStoreMigrateSQLNeedsNoServer(t *testing.T) {
	code, out, _ := testenv.Run(t, leasectl(t, "postgres://nobody@127.0.0.1:1/db", "Team/a", "store", "migrate", "--sql"))
	if code != 0 || !strings.HasPrefix(out, "-- leasectl: schema \"Team/a\"") || !strings.Contains(out, "\nCOMMIT;\n") {
		t.Fatalf("store migrate --sql: exit %d, output starts %.80q", code, out)
	}
	if code, _, stderr := testenv.Run(t, leasectl(t, "", "ns", "store", "migrate")); code != 0 || !strings.Contains(stderr, "nothing to migrate") {
		t.Errorf("store migrate on the embedded store: exit %d, stderr %q", code, stderr)
	}
}

func TestServerRestartedDuringARun(t *testing.T) {
	srv := ownPG(t)
	// Long enough a safety window for a restart and its crash recovery on
	// a loaded machine.
	const ttl, heartbeat, safety = 8 * time.Second, 500 * time.Millisecond, 6 * time.Second
	r := start(t, leasectl(t, srv.URL, "ns", append(append([]string{"run", "--job", "restart"}, timing(ttl, heartbeat, safety)...), "--", "sh", "-c", childScript)...))
	pid, _ := r.Expect("pid ")
	token, _ := r.Expect("token ")
	before := liveUntil(t, srv, "ns", "restart")
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	awaitRenewal(t, srv, "ns", "restart", before)
	if code := r.finish(); code != 0 {
		t.Fatalf("exit %d after the server restarted, want 0: the lease was kept", code)
	}
	if result, last := lastOutcome(t, srv.URL, "ns", "restart"); !strings.EqualFold(result, "completed") || strconv.FormatInt(last, 10) != token {
		t.Errorf("last outcome %s with token %d, want completed with token %s", result, last, token)
	}
	t.Logf("child %s ran through the restart", pid)
}

func TestServerFrozenPastTheSafetyWindow(t *testing.T) {
	srv := ownPG(t)
	r := start(t, leasectl(t, srv.URL, "ns", append(append([]string{"run", "--job", "frozen"}, timing(ttl, heartbeat, safety)...), "--", "sh", "-c", childScript)...))
	s, _ := r.Expect("pid ")
	pid, _ := strconv.Atoi(s)
	// Let a few renewals through, then freeze: the last confirmed renewal
	// was sent before this instant.
	time.Sleep(2 * heartbeat)
	frozenAt := time.Now()
	if err := srv.Freeze(); err != nil {
		t.Fatal(err)
	}
	defer srv.Thaw()
	latency := testenv.DeathTime(t, pid).Sub(frozenAt)
	t.Logf("child died %s after the freeze (safety %s)", latency, safety)
	if latency > safety+50*time.Millisecond {
		t.Errorf("child died %s after the freeze, want within safety + 50ms = %s", latency, safety+50*time.Millisecond)
	}
	if code := r.ExitCode(); code != 125 {
		t.Errorf("exit code %d, want 125 (lease lost)", code)
	}
}

func TestBackendTerminatedDuringARun(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	url := withApp(srv.URL, ns)
	r := start(t, leasectl(t, url, ns, append(append([]string{"run", "--job", "terminated"}, timing(ttl, heartbeat, safety)...), "--", "sh", "-c", childScript)...))
	r.Expect("pid ")
	token, _ := r.Expect("token ")
	before := liveUntil(t, srv, ns, "terminated")
	if n := terminate(t, srv, ns); n == 0 {
		t.Fatal("no backend of the run to terminate")
	}
	awaitRenewal(t, srv, ns, "terminated", before)
	if code := r.finish(); code != 0 {
		t.Fatalf("exit %d after its backend was terminated, want 0: the run reconnects and keeps its lease", code)
	}
	if result, last := lastOutcome(t, url, ns, "terminated"); !strings.EqualFold(result, "completed") || strconv.FormatInt(last, 10) != token {
		t.Errorf("last outcome %s with token %d, want completed with token %s", result, last, token)
	}
}

func TestReadOnlyAndRightlessRolesExit69(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	migrated(t, srv, ns)
	readOnly := role(t, srv, "ro_run", "ro-Pa55", "GRANT USAGE ON SCHEMA "+quoteIdent(ns)+" TO ro_run",
		"ALTER ROLE ro_run SET default_transaction_read_only = on")
	rightless := role(t, srv, "no_run", "no-Pa55")
	for _, tc := range []struct {
		name, url, want, secret string
	}{
		{"read-only", readOnly, "refuses writes", "ro-Pa55"},
		{"no rights", rightless, `role \"no_run\" lacks a right leasectl needs`, "no-Pa55"}, // as the JSON log line quotes it
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := testenv.Run(t, leasectl(t, tc.url, ns, "run", "--job", "j", "--", "true"))
			if code != 69 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 69 and %q", code, stderr, tc.want)
			}
			if strings.Contains(stderr, tc.secret) {
				t.Errorf("stderr %q reveals the password", stderr)
			}
		})
	}
}

func TestHandoffWithWaitIsWokenByNotify(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	// A TTL far longer than the test: only the notification can wake the
	// waiter in time.
	holder := start(t, leasectl(t, srv.URL, ns, "run", "--job", "handoff", "--ttl", "1m", "--", "sh", "-c", childScript))
	holder.Expect("pid ")
	holder.Expect("token ")
	waiter := start(t, leasectl(t, srv.URL, ns, "--log-level", "debug", "run", "--job", "handoff", "--wait", "--ttl", "1m", "--", "sh", "-c", "echo started"))
	waiter.ExpectLog("lease held; waiting")
	io.WriteString(holder.stdin, "go\n")
	_, ended := holder.Expect("ending")
	_, started := waiter.Expect("started")
	t.Logf("handoff: %s from the holder's last line to the waiter's first", started.Sub(ended))
	if d := started.Sub(ended); d > 10*time.Second {
		t.Errorf("the waiter started %s after the release: it was not woken by the notification", d)
	}
	if c := holder.ExitCode(); c != 0 {
		t.Errorf("holder exit %d", c)
	}
	if c := waiter.ExitCode(); c != 0 {
		t.Errorf("waiter exit %d", c)
	}
}

func TestScanCountsAKilledSupervisorOnce(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	const ttl = 500 * time.Millisecond
	r := start(t, leasectl(t, srv.URL, ns, append(append([]string{"run", "--job", "reaped"}, timing(ttl, 100*time.Millisecond, 300*time.Millisecond)...), "--", "sh", "-c", childScript)...))
	s, _ := r.Expect("pid ")
	pid, _ := strconv.Atoi(s)
	if err := r.Cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.DeathTime(t, pid)
	time.Sleep(ttl + 100*time.Millisecond) // the lease's liveness runs out
	scan := func() []map[string]any {
		t.Helper()
		code, out, _ := testenv.Run(t, leasectl(t, srv.URL, ns, "scan", "--json"))
		if code != 0 {
			t.Fatalf("scan exit %d", code)
		}
		var crashes []map[string]any
		if err := json.Unmarshal([]byte(out), &crashes); err != nil {
			t.Fatalf("scan --json: %v\n%s", err, out)
		}
		return crashes
	}
	if first := scan(); len(first) != 1 || first[0]["job"] != "reaped" || first[0]["crashes"] != 1.0 {
		t.Fatalf("first scan found %v, want the one crash of job reaped", first)
	}
	if again := scan(); len(again) != 0 {
		t.Fatalf("second scan found %v again, want nothing: a crash is counted once", again)
	}
}

// TestLeastPrivilegeSetUp follows the README's set-up: an owner role
// migrates the schema with `leasectl store migrate` and grants USAGE on it
// to the role the runs use, which may do nothing else.
func TestLeastPrivilegeSetUp(t *testing.T) {
	srv := testPG.Get(t)
	execSQL(t, srv, "REVOKE CREATE ON DATABASE postgres FROM PUBLIC")
	owner := role(t, srv, "ls_owner", "ow-Pa55", "GRANT CREATE ON DATABASE postgres TO ls_owner")
	runner := role(t, srv, "ls_run", "ru-Pa55")
	ns := freshNamespace()
	if code, _, _ := testenv.Run(t, leasectl(t, owner, ns, "store", "migrate")); code != 0 {
		t.Fatalf("store migrate as the owner: exit %d", code)
	}
	if code, _, stderr := testenv.Run(t, leasectl(t, runner, ns, "run", "--job", "j", "--", "true")); code != 69 || !strings.Contains(stderr, "GRANT USAGE ON SCHEMA") {
		t.Fatalf("run before the grant: exit %d, stderr %q; want 69 naming the grant", code, stderr)
	}
	rawConn(t, owner, "GRANT USAGE ON SCHEMA "+quoteIdent(ns)+" TO ls_run")
	if code, _, _ := testenv.Run(t, leasectl(t, runner, ns, "run", "--job", "j", "--", "true")); code != 0 {
		t.Fatalf("run after the grant: exit %d", code)
	}
	if code, _, stderr := testenv.Run(t, leasectl(t, runner, freshNamespace(), "run", "--job", "j", "--", "true")); code != 69 || !strings.Contains(stderr, "permission denied for database") {
		t.Errorf("run in a namespace nobody migrated: exit %d, stderr %q; want 69: the runner may not create schemas", code, stderr)
	}
}

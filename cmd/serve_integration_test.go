package cmd

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/registrytest"
	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/httpstore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// The registry as users run it: the built binary's `serve` in front of an
// embedded store, and `run`, `status`, `quarantine`, `token check` through
// it with --store https://... .

// eventTimeout bounds every wait for something a process says or does;
// generous, for a loaded 2-core machine: it only catches hangs.
const eventTimeout = 20 * time.Second

// registrySetup is one test's store, certificates and tokens file.
type registrySetup struct {
	bin    string
	store  string // the store serve fronts
	certs  testcert.Files
	tokens string // the tokens file
}

func newRegistrySetup(t testing.TB) *registrySetup {
	t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	certs, err := testcert.Generate(dir)
	if err != nil {
		t.Fatal(err)
	}
	tokens := filepath.Join(dir, "registry.tokens")
	if err := os.WriteFile(tokens, []byte(registrytest.TokensFile), 0o600); err != nil {
		t.Fatal(err)
	}
	return &registrySetup{bin: bin, store: "file://" + filepath.Join(dir, "store"), certs: certs, tokens: tokens}
}

// serveProc is a running `leasectl serve` whose JSON log is watched.
type serveProc struct {
	cmd  *exec.Cmd
	url  string
	mu   sync.Mutex
	log  []map[string]any
	more chan struct{} // signalled on each new log line
	done chan struct{} // closed when its stderr ends
}

// serve starts `leasectl serve` on listen (127.0.0.1:0 for a free port)
// and returns once it serves.
func (rs *registrySetup) serve(t testing.TB, listen string, args ...string) *serveProc {
	t.Helper()
	cmd := exec.Command(rs.bin, append([]string{"serve", "--store", rs.store, "--listen", listen, "--tokens", rs.tokens,
		"--tls-cert", rs.certs.ServerCert, "--tls-key", rs.certs.ServerKey, "--log-format", "json", "--log-level", "debug"}, args...)...)
	cmd.Env = cleanEnv()
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &serveProc{cmd: cmd, more: make(chan struct{}, 1), done: make(chan struct{})}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-p.done
		_ = cmd.Wait()
	})
	go func() {
		defer close(p.done)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			var line map[string]any
			if json.Unmarshal(sc.Bytes(), &line) != nil {
				line = map[string]any{"message": sc.Text()}
			}
			p.mu.Lock()
			p.log = append(p.log, line)
			p.mu.Unlock()
			select {
			case p.more <- struct{}{}:
			default:
			}
		}
	}()
	serving := p.await(t, "serving", func(l map[string]any) bool { return strings.HasPrefix(str(l["message"]), "serving the registry") })
	p.url = str(serving["url"])
	return p
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// await returns the first log line (from the start) that match accepts,
// failing the test if none comes within eventTimeout.
func (p *serveProc) await(t testing.TB, what string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	deadline := time.After(eventTimeout)
	seen := 0
	for {
		p.mu.Lock()
		lines := p.log[seen:]
		seen = len(p.log)
		p.mu.Unlock()
		for _, l := range lines {
			if match(l) {
				return l
			}
		}
		select {
		case <-p.more:
		case <-p.done:
			p.mu.Lock()
			n := len(p.log)
			p.mu.Unlock()
			if n == seen {
				t.Fatalf("serve ended before %s; its log: %v", what, p.log)
			}
		case <-deadline:
			t.Fatalf("serve did not log %s within %s; its log: %v", what, eventTimeout, p.log)
		}
	}
}

// heartbeats counts the successful heartbeats serve logged.
func (p *serveProc) heartbeats() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, l := range p.log {
		if str(l["route"]) == "heartbeat" && l["status"] == float64(200) {
			n++
		}
	}
	return n
}

// cleanEnv is the environment without any LEASECTL_ setting of the caller.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "LEASECTL_") {
			env = append(env, kv)
		}
	}
	return env
}

// leasectl is a leasectl command through the registry at url with token.
func (rs *registrySetup) leasectl(url, token string, args ...string) *exec.Cmd {
	cmd := exec.Command(rs.bin, args...)
	cmd.Env = append(cleanEnv(), "LEASECTL_STORE="+url, "LEASECTL_CA_FILE="+rs.certs.CA, "LEASECTL_LOG_FORMAT=json")
	if token != "" {
		cmd.Env = append(cmd.Env, "LEASECTL_TOKEN="+token)
	}
	return cmd
}

// runExit runs cmd and returns its exit code and combined output.
func runExit(t *testing.T, cmd *exec.Cmd) (int, string) {
	t.Helper()
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0, string(out)
	case errors.As(err, &ee):
		return ee.ExitCode(), string(out)
	default:
		t.Fatalf("%v: %v", cmd.Args, err)
		return 0, ""
	}
}

// heldRun is a `leasectl run` whose child says "started PID" and waits for
// its stdin to close, then exits 0.
type heldRun struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	pid   int // the child's
	exit  chan int
}

func (rs *registrySetup) startHeldRun(t *testing.T, url string, args ...string) *heldRun {
	t.Helper()
	args = append(append([]string{"run"}, args...), "--", "sh", "-c", `echo "started $$"; read line; echo done`)
	cmd := rs.leasectl(url, registrytest.WorkerToken, args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &heldRun{cmd: cmd, stdin: stdin, exit: make(chan int, 1)}
	started := make(chan int, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if pid, ok := strings.CutPrefix(sc.Text(), "started "); ok {
				n, _ := strconv.Atoi(pid)
				started <- n
			}
		}
		err := cmd.Wait()
		code := 0
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			code = ee.ExitCode()
		}
		r.exit <- code
	}()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		if r.pid > 0 {
			_ = syscall.Kill(r.pid, syscall.SIGKILL)
		}
	})
	select {
	case r.pid = <-started:
	case code := <-r.exit:
		t.Fatalf("run exited %d before its child started: %s", code, stderr.String())
	case <-time.After(eventTimeout):
		t.Fatalf("the run's child did not start within %s: %s", eventTimeout, stderr.String())
	}
	return r
}

// alive reports whether process pid exists.
func alive(pid int) bool { return syscall.Kill(pid, 0) == nil }

// exitWatch returns a channel that receives the time process pid (not
// this process's child) exits, watched through a pidfd.
func exitWatch(t *testing.T, pid int) <-chan time.Time {
	t.Helper()
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Fatalf("pidfd of %d: %v", pid, err)
	}
	exited := make(chan time.Time, 1)
	go func() {
		defer unix.Close(fd)
		fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
		for {
			n, err := unix.Poll(fds, int(eventTimeout.Milliseconds()))
			if err == unix.EINTR {
				continue
			}
			if err == nil && n == 1 {
				exited <- time.Now()
			}
			return
		}
	}()
	return exited
}

// The registry is SIGKILLed while a run holds its lease: renewals fail,
// and the child is killed by its safety deadline, which counts from the
// send time of the last confirmed heartbeat (exit 125).
func TestRunThroughKilledRegistry(t *testing.T) {
	rs := newRegistrySetup(t)
	reg := rs.serve(t, "127.0.0.1:0")
	const safety = 800 * time.Millisecond
	run := rs.startHeldRun(t, reg.url, "--job", "nightly", "--ttl", "2s", "--heartbeat", "200ms", "--safety", safety.String())
	childExit := exitWatch(t, run.pid)
	// Kill it right after a confirmed heartbeat: the deadline is at most
	// that heartbeat's send time + safety, so the child must die within
	// safety of the kill.
	before := reg.heartbeats()
	reg.await(t, "a heartbeat", func(map[string]any) bool { return reg.heartbeats() > before })
	killed := time.Now()
	if err := reg.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	select {
	case died := <-childExit:
		if took := died.Sub(killed); took > safety+300*time.Millisecond {
			t.Errorf("the child died %s after the registry, want within --safety %s (and a margin)", took, safety)
		}
	case <-time.After(eventTimeout):
		t.Fatal("the child went on without its registry")
	}
	// The run then tries to record the outcome for a while, and ends as
	// lease lost.
	select {
	case code := <-run.exit:
		if code != exitLeaseLost {
			t.Errorf("run exited %d after the registry died, want %d (lease lost)", code, exitLeaseLost)
		}
	case <-time.After(eventTimeout):
		t.Fatal("the run did not end")
	}
}

// The registry is killed and restarted on the same address within the
// safety window: the run's renewals reach it again and the run keeps its
// lease; its child ends by itself (exit 0).
func TestRunSurvivesARegistryRestart(t *testing.T) {
	rs := newRegistrySetup(t)
	reg := rs.serve(t, "127.0.0.1:0")
	addr := strings.TrimPrefix(reg.url, "https://")
	run := rs.startHeldRun(t, reg.url, "--job", "ingest", "--ttl", "6s", "--heartbeat", "300ms", "--safety", "4s")
	if err := reg.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-reg.done
	restarted := rs.serve(t, addr)
	restarted.await(t, "a heartbeat after the restart", func(l map[string]any) bool {
		return str(l["route"]) == "heartbeat" && l["status"] == float64(200) && str(l["job"]) == "ingest"
	})
	if !alive(run.pid) {
		t.Fatal("the child died although its run reached the restarted registry")
	}
	if err := run.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case code := <-run.exit:
		if code != 0 {
			t.Errorf("run exited %d, want 0: it kept its lease through the restart", code)
		}
	case <-time.After(eventTimeout):
		t.Fatal("the run did not end")
	}
	// Its outcome was recorded through the new registry.
	code, out := runExit(t, rs.leasectl(restarted.url, registrytest.ReaderToken, "status", "ingest", "--json"))
	var st struct {
		LastOutcome struct {
			Result string `json:"result"`
		} `json:"last_outcome"`
	}
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.LastOutcome.Result != "COMPLETED" {
		t.Errorf("status after the run: exit %d\n%s\nwant its last outcome COMPLETED", code, out)
	}
}

// A wrong token is refused with exit 69 and one line naming
// authentication; a worker's token may not quarantine (exit 79, a line
// naming the role needed); a reader's may read.
func TestRegistryTokensAndRoles(t *testing.T) {
	rs := newRegistrySetup(t)
	reg := rs.serve(t, "127.0.0.1:0")

	code, out := runExit(t, rs.leasectl(reg.url, "not-a-token-of-this-registry", "run", "--job", "j", "--", "true"))
	if code != exitUnavailable || !strings.Contains(out, "authentication") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("run with a wrong token: exit %d\n%s\nwant 69 and one line naming authentication", code, out)
	}
	if strings.Contains(out, "not-a-token-of-this-registry") {
		t.Errorf("the error shows the token: %s", out)
	}
	code, out = runExit(t, rs.leasectl(reg.url, "", "status", "j"))
	if code != exitUnavailable || !strings.Contains(out, "LEASECTL_TOKEN") {
		t.Errorf("status without a token: exit %d\n%s\nwant 69 naming LEASECTL_TOKEN", code, out)
	}
	code, out = runExit(t, rs.leasectl(reg.url, registrytest.WorkerToken, "quarantine", "add", "j", "--reason", "bad input"))
	if code != exitForbidden || !strings.Contains(out, "role worker") || !strings.Contains(out, "needs the operator role") || strings.Count(strings.TrimSpace(out), "\n") != 0 {
		t.Errorf("quarantine add with a worker's token: exit %d\n%s\nwant 79 and one line naming the role needed", code, out)
	}
	if code, out := runExit(t, rs.leasectl(reg.url, registrytest.OperatorToken, "quarantine", "add", "j", "--reason", "bad input")); code != 0 {
		t.Errorf("quarantine add with an operator's token: exit %d\n%s", code, out)
	}
	if code, out := runExit(t, rs.leasectl(reg.url, registrytest.WorkerToken, "run", "--job", "j", "--", "true")); code != exitQuarantined {
		t.Errorf("run of the quarantined job: exit %d\n%s", code, out)
	}
	if code, out := runExit(t, rs.leasectl(reg.url, registrytest.ReaderToken, "quarantine", "list")); code != 0 || !strings.Contains(out, "bad input") {
		t.Errorf("quarantine list with a reader's token: exit %d\n%s", code, out)
	}

	// SIGHUP re-reads the tokens file: a removed token is refused.
	if err := os.WriteFile(rs.tokens, []byte("operator "+registrytest.OperatorToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := reg.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	reg.await(t, "the tokens re-read", func(l map[string]any) bool { return str(l["message"]) == "SIGHUP: tokens re-read" })
	if code, out := runExit(t, rs.leasectl(reg.url, registrytest.ReaderToken, "ls")); code != exitUnavailable || !strings.Contains(out, "authentication") {
		t.Errorf("ls with a token removed by SIGHUP: exit %d\n%s", code, out)
	}
}

// Seed 002 through the registry with leasectl's own commands: duplicate
// prevention (a second run is refused, naming the owner), crash failover
// (a SIGKILLed run's lease expires, the next run gets a higher token, the
// old token is rejected as stale), and regional isolation.
func TestSeedScenariosThroughTheRegistry(t *testing.T) {
	rs := newRegistrySetup(t)
	reg := rs.serve(t, "127.0.0.1:0")

	first := rs.startHeldRun(t, reg.url, "--job", "video_encode_12345", "--worker-id", "worker-7", "--ttl", "1s")
	code, out := runExit(t, rs.leasectl(reg.url, registrytest.WorkerToken, "run", "--job", "video_encode_12345", "--worker-id", "worker-9", "--", "true"))
	if code != exitHeld || !strings.Contains(out, "worker-7") {
		t.Errorf("worker-9's run while worker-7 holds the job: exit %d\n%s\nwant 75 naming worker-7", code, out)
	}
	var st struct {
		Token int64 `json:"token"`
	}
	code, out = runExit(t, rs.leasectl(reg.url, registrytest.ReaderToken, "status", "video_encode_12345", "--json"))
	if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.Token <= 0 {
		t.Fatalf("status: exit %d\n%s", code, out)
	}

	// worker-7 crashes: its supervisor is SIGKILLed (its watchdog kills the
	// child); the lease expires.
	if err := first.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-first.exit
	code, out = runExit(t, rs.leasectl(reg.url, registrytest.WorkerToken, "run", "--job", "video_encode_12345", "--worker-id", "worker-9",
		"--wait", "--wait-timeout", "10s", "--", "sh", "-c", `echo "fencing-token=$LEASECTL_FENCING_TOKEN"`))
	var newToken int64
	for _, line := range strings.Split(out, "\n") {
		if v, ok := strings.CutPrefix(line, "fencing-token="); ok {
			newToken, _ = strconv.ParseInt(v, 10, 64)
		}
	}
	if code != 0 || newToken <= st.Token {
		t.Fatalf("worker-9's run after the crash: exit %d, token %d after %d\n%s", code, newToken, st.Token, out)
	}
	code, out = runExit(t, rs.leasectl(reg.url, registrytest.WorkerToken, "token", "check", "--job", "video_encode_12345", "--token", strconv.FormatInt(st.Token, 10)))
	if code != exitFailure || !strings.Contains(out, "stale") {
		t.Errorf("worker-7's token after failover: exit %d\n%s\nwant 1, stale", code, out)
	}

	// Regional isolation: the first grant naming a region records it.
	inRegion := func(region string) string { return reg.url + "?region=" + region }
	if code, out := runExit(t, rs.leasectl(inRegion("us-east-1"), registrytest.WorkerToken, "run", "--job", "encode-us", "--", "true")); code != 0 {
		t.Fatalf("run in us-east-1: exit %d\n%s", code, out)
	}
	code, out = runExit(t, rs.leasectl(inRegion("eu-west-1"), registrytest.WorkerToken, "run", "--job", "encode-us", "--", "true"))
	if code != exitRegion || !strings.Contains(out, "us-east-1") {
		t.Errorf("run of a us-east-1 job from eu-west-1: exit %d\n%s\nwant %d naming the job's region", code, out, exitRegion)
	}
}

// A run waiting with --wait through the registry is woken by the release
// (a long-poll), long before the holder's lease would expire.
func TestWaitThroughTheRegistry(t *testing.T) {
	rs := newRegistrySetup(t)
	reg := rs.serve(t, "127.0.0.1:0")
	holder := rs.startHeldRun(t, reg.url, "--job", "report", "--ttl", "30s")
	waiter := rs.leasectl(reg.url, registrytest.WorkerToken, "--log-level", "debug", "run", "--job", "report", "--wait", "--wait-timeout", "20s", "--", "echo", "my turn")
	var out strings.Builder
	waiter.Stdout = &out
	stderr, err := waiter.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	// Release once the waiter waits.
	sc := bufio.NewScanner(stderr)
	for sc.Scan() && !strings.Contains(sc.Text(), "lease held; waiting") {
	}
	go func() { _, _ = io.Copy(io.Discard, stderr) }()
	released := time.Now()
	if err := holder.stdin.Close(); err != nil {
		t.Fatal(err)
	}
	if err := waiter.Wait(); err != nil {
		t.Fatalf("the waiting run: %v", err)
	}
	if took := time.Since(released); took > 10*time.Second || !strings.Contains(out.String(), "my turn") {
		t.Errorf("the waiter ran %s after the release (output %q); want it woken by the release, not the 30 s TTL", took, out.String())
	}
	if code := <-holder.exit; code != 0 {
		t.Errorf("the holder exited %d", code)
	}
}

// SIGTERM stops serve gracefully (exit 0).
func TestServeStopsOnSIGTERM(t *testing.T) {
	rs := newRegistrySetup(t)
	reg := rs.serve(t, "127.0.0.1:0")
	if err := reg.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	reg.await(t, "that it stopped", func(l map[string]any) bool { return str(l["message"]) == "registry stopped" })
	<-reg.done
	if err := reg.cmd.Wait(); err != nil {
		t.Errorf("serve after SIGTERM: %v, want exit 0", err)
	}
}

// serve's flags are checked before any I/O.
func TestServeFlags(t *testing.T) {
	tests := []struct {
		args []string
		says string
	}{
		{[]string{"serve", "--listen", "0.0.0.0:8080", "--tokens", "t"}, "only on a loopback address"},
		{[]string{"serve", "--listen", "8080", "--tokens", "t"}, "HOST:PORT"},
		{[]string{"serve", "--listen", "127.0.0.1:0"}, `"tokens" not set`},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--tokens", "t", "--tls-cert", "c"}, "go together"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--tokens", "t", "--client-ca", "ca"}, "needs --tls-cert"},
		{[]string{"--store", "https://registry:8443", "serve", "--listen", "127.0.0.1:0", "--tokens", "t"}, "is a registry"},
		{[]string{"serve", "--listen", "127.0.0.1:0", "--tokens", "/nonexistent/tokens"}, "tokens file /nonexistent/tokens"},
	}
	for _, tc := range tests {
		code, _, errOut := runCmd(t, tc.args...)
		if code != exitUsage || !strings.Contains(errOut, tc.says) {
			t.Errorf("%v: exit %d, %q; want 64 saying %q", tc.args, code, errOut, tc.says)
		}
	}
}

// runCmd runs leasectl's command tree in this process and returns its exit
// code, stdout and stderr.
func runCmd(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errOut strings.Builder
	f := NewFactory()
	f.IO = &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	f.Globals.LogFormat = "json"
	root := NewCmdRoot(f)
	root.SetArgs(args)
	code := reportError(&errOut, root.Execute())
	return code, out.String(), errOut.String()
}

// conformanceHarness runs the store conformance suite through the built
// binary's serve: each test gets a fresh serve in front of a fresh store.
type conformanceHarness struct {
	store func(t testing.TB) (url, namespace string, wipe func(t testing.TB))
}

func (h conformanceHarness) NewStore(t testing.TB) storetest.Fixture {
	rs := newRegistrySetup(t)
	url, ns, wipe := h.store(t)
	rs.store = url
	reg := rs.serve(t, "127.0.0.1:0", "--namespace", ns)
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver {
			s, err := httpstore.Open(reg.url, ns, httpstore.Options{Token: registrytest.OperatorToken, CAFile: rs.certs.CA})
			if err != nil {
				t.Fatal(err)
			}
			return s
		},
		Wipe: wipe,
	}
}

func (h conformanceHarness) Abilities() storetest.Abilities {
	return storetest.Abilities{}
}

// TestConformanceThroughServe is the store contract through `leasectl
// serve`, in front of the embedded store and of Redis.
func TestConformanceThroughServe(t *testing.T) {
	t.Run("embedded", func(t *testing.T) {
		storetest.Run(t, conformanceHarness{store: func(t testing.TB) (string, string, func(testing.TB)) {
			dir := t.TempDir()
			return "file://" + dir, "leasectl", func(t testing.TB) {
				// The embedded store's data (leasestore/filestore, file.go).
				if err := os.RemoveAll(filepath.Join(dir, "leasectl.store")); err != nil {
					t.Fatalf("wipe: %v", err)
				}
			}
		}})
	})
	t.Run("redis", func(t *testing.T) {
		srv, err := redistest.Start(redistest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Stop() })
		storetest.Run(t, conformanceHarness{store: func(testing.TB) (string, string, func(testing.TB)) {
			return srv.URL, fmt.Sprintf("serve%d", namespaceSeq.Add(1)), func(t testing.TB) {
				if _, err := srv.Do("FLUSHALL"); err != nil {
					t.Fatal(err)
				}
			}
		}})
	})
}

// TestReadmeRegistry runs the README's registry demo as written, on a free
// port instead of its 8480, and checks what its comments promise.
func TestReadmeRegistry(t *testing.T) {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- registry -->")
	section, _, ok2 := strings.Cut(rest, "<!-- /registry -->")
	_, block, ok3 := strings.Cut(section, "```sh\n")
	block, _, ok4 := strings.Cut(block, "```")
	if !ok || !ok2 || !ok3 || !ok4 {
		t.Fatal("README.md has no <!-- registry --> section with an sh block")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	if !strings.Contains(block, "127.0.0.1:8480") {
		t.Fatal("the registry demo no longer serves on 127.0.0.1:8480; update this test")
	}
	block = strings.ReplaceAll(block, "127.0.0.1:8480", addr)

	dir := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sh", "-e", "-c", block)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), "PATH="+filepath.Dir(bin)+string(os.PathListSeparator)+os.Getenv("PATH"),
		"HOME="+dir, "XDG_STATE_HOME="+dir, "LEASECTL_LOG_LEVEL=warn")
	out, err := cmd.CombinedOutput()
	if err != nil {
		log, _ := os.ReadFile(filepath.Join(dir, "registry.log"))
		t.Fatalf("the registry demo failed: %v\n%s\nregistry log:\n%s", err, out, log)
	}
	for _, want := range []string{", through the registry", "state", "role worker", "refused: exit 79", "quarantined: exit 76"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("the registry demo's output lacks %q:\n%s", want, out)
		}
	}
}

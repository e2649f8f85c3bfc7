package main

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testenv"
)

// hangGuard only catches a hung leasectl; it is no timing assertion.
const hangGuard = 30 * time.Second

// aclPassword replaces PASSWORD in the README's ACL line.
const aclPassword = "acl-Pa55w0rd"

// readmeACL returns the README's ACL SETUSER line, split into its words
// with PASSWORD replaced, and the extra grants the README names for
// ?min_replicas= and for a Redis Cluster.
func readmeACL(t *testing.T) (acl []string, minReplicas, cluster string) {
	t.Helper()
	readme, err := os.ReadFile("README.md")
	if err != nil {
		t.Fatal(err)
	}
	line := regexp.MustCompile(`(?m)^ACL SETUSER leasectl .*$`).FindString(string(readme))
	if line == "" {
		t.Fatal("README.md has no ACL SETUSER leasectl line")
	}
	extra := regexp.MustCompile("Add `(\\+\\S+)` for `\\?min_replicas=`, and `(\\+\\S+)` on a Redis Cluster").FindStringSubmatch(string(readme))
	if extra == nil {
		t.Fatal("README.md does not say what to add for ?min_replicas= and on a Redis Cluster")
	}
	return strings.Fields(strings.ReplaceAll(line, "PASSWORD", aclPassword)), extra[1], extra[2]
}

// clientCommands are the commands leasectl itself sends, beyond those its
// Lua scripts run: the scripts (EVAL when the server lost them), for
// --wait the subscription and go-redis's health check on it, and for the
// notices those the compare-and-swap script does not (HGET it runs too).
var clientCommands = []string{"+evalsha", "+eval", "+subscribe", "+ping", "+hsetnx", "+hvals"}

// TestReadmeACLGrantsWhatTheScriptsRunAndNoMore compares the commands the
// README's ACL grants with those leasectl sends and its Lua scripts run:
// a command missing fails a run, one too many is more privilege than
// needed.
func TestReadmeACLGrantsWhatTheScriptsRunAndNoMore(t *testing.T) {
	acl, _, _ := readmeACL(t)
	var granted []string
	for _, w := range acl {
		if strings.HasPrefix(w, "+") {
			granted = append(granted, w)
		}
		if strings.HasPrefix(w, "+@") || w == "allcommands" || w == "allkeys" || w == "~*" || w == "allchannels" || w == "&*" {
			t.Errorf("the README's ACL grants %s: more than leasectl needs", w)
		}
	}
	needed := slices.Clone(clientCommands)
	lua, err := filepath.Glob("leasestore/redisstore/lua/*.lua")
	if err != nil || len(lua) == 0 {
		t.Fatalf("no Lua scripts found (err %v)", err)
	}
	call := regexp.MustCompile(`redis\.call\('([A-Z]+)'`)
	for _, f := range lua {
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range call.FindAllStringSubmatch(string(src), -1) {
			if c := "+" + strings.ToLower(m[1]); !slices.Contains(needed, c) {
				needed = append(needed, c)
			}
		}
	}
	sort.Strings(granted)
	sort.Strings(needed)
	if !slices.Equal(granted, needed) {
		t.Errorf("the README's ACL grants\n  %v\nleasectl sends and its scripts run\n  %v", granted, needed)
	}
}

// TestReadmeACLOnARealRedis creates the README's ACL user on real
// redis-servers and drives every command through the built binary as that
// user: run (with a child checking its token), a wait ended by a release,
// a crash the reaper counts, status, ls, quarantine, token check, the
// reaper's metrics, and a run after the server lost its scripts. Redis's
// own ACL log must then be empty: nothing was refused, not even what
// go-redis would have shrugged off.
func TestReadmeACLOnARealRedis(t *testing.T) {
	acl, minReplicas, cluster := readmeACL(t)
	t.Run("single server", func(t *testing.T) {
		srv, err := redistest.Start(redistest.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = srv.Stop() })
		setACL(t, acl, srv)
		lc := aclUser{t: t, url: "redis://leasectl:" + aclPassword + "@" + srv.Addr + "/0"}
		lc.everyCommand()
		if _, err := srv.Do("SCRIPT", "FLUSH"); err != nil {
			t.Fatal(err)
		}
		lc.want(0, "run", "--job", "after-flush", "--", "true")
		noDenials(t, srv)
	})
	t.Run("min_replicas", func(t *testing.T) {
		// No delay before the replica's first sync: nothing here gains from
		// waiting for more replicas to join it.
		primary, err := redistest.Start(redistest.Options{Args: []string{"--repl-diskless-sync-delay", "0"}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = primary.Stop() })
		host, port, _ := strings.Cut(primary.Addr, ":")
		replica, err := redistest.Start(redistest.Options{Args: []string{"--replicaof", host, port}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = replica.Stop() })
		setACL(t, append(slices.Clone(acl), minReplicas), primary, replica)
		lc := aclUser{t: t, url: "redis://leasectl:" + aclPassword + "@" + primary.Addr + "/0?min_replicas=1"}
		lc.want(0, "run", "--job", "replicated", "--", "true")
		noDenials(t, primary, replica)
	})
	t.Run("cluster", func(t *testing.T) {
		c, err := redistest.StartCluster(redistest.ClusterOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.Stop() })
		setACL(t, append(slices.Clone(acl), cluster), c.Masters...)
		lc := aclUser{t: t, url: "redis+cluster://leasectl:" + aclPassword + "@" + strings.TrimPrefix(c.URL(), "redis://")}
		lc.everyCommand()
		noDenials(t, c.Masters...)
	})
}

// setACL runs the ACL SETUSER words on each server.
func setACL(t *testing.T, acl []string, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		if _, err := s.Do(acl...); err != nil {
			t.Fatalf("%s on %s: %v", strings.Join(acl, " "), s.Addr, err)
		}
	}
}

// noDenials fails the test if a server's ACL log has an entry.
func noDenials(t *testing.T, servers ...*redistest.Server) {
	t.Helper()
	for _, s := range servers {
		log, err := s.Do("ACL", "LOG")
		if err != nil {
			t.Fatal(err)
		}
		if log != "" {
			t.Errorf("Redis at %s logged ACL denials:\n%s", s.Addr, log)
		}
	}
}

// aclUser runs the built binary against url, as the README's ACL user.
type aclUser struct {
	t   *testing.T
	url string
}

func (u aclUser) cmd(args ...string) *exec.Cmd {
	u.t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		u.t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{
		"PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
		"HOME=" + u.t.TempDir(),
		"LEASECTL_STORE=" + u.url,
		"LEASECTL_LOG_FORMAT=json",
	}
	return cmd
}

// want runs leasectl with args and fails the test unless it exits code;
// it returns stdout.
func (u aclUser) want(code int, args ...string) string {
	u.t.Helper()
	got, out, errOut := testenv.Run(u.t, u.cmd(args...))
	if got != code {
		u.t.Fatalf("leasectl %q: exit %d, want %d; stderr: %s", args, got, code, errOut)
	}
	return out
}

// started runs leasectl in the background and returns once its child said
// "started" on stdout; the child goes on until its stdin closes.
func (u aclUser) started(args ...string) (*exec.Cmd, io.WriteCloser, <-chan error) {
	u.t.Helper()
	cmd := u.cmd(args...)
	stdin, err := cmd.StdinPipe()
	if err != nil {
		u.t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		u.t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		u.t.Fatal(err)
	}
	done := make(chan error, 1)
	u.t.Cleanup(func() { _ = cmd.Process.Kill() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		done <- cmd.Wait()
	}()
	select {
	case l := <-line:
		if l != "started" {
			u.t.Fatalf("child said %q, want started", l)
		}
	case <-time.After(hangGuard):
		u.t.Fatal("the child never started")
	}
	return cmd, stdin, done
}

// pubsubHealthCheck is how long go-redis lets a subscription stay silent
// before it PINGs the server: a wait longer than that needs PING.
const pubsubHealthCheck = 3 * time.Second

// everyCommand drives each leasectl command once as the ACL user.
func (u aclUser) everyCommand() {
	t := u.t
	t.Helper()
	// A run whose child fences its commit with token check, through the
	// store the run was given.
	u.want(0, "run", "--job", "fenced", "--", "sh", "-c", `leasectl token check --job "$LEASECTL_JOB_ID" --token "$LEASECTL_FENCING_TOKEN"`)
	u.want(1, "token", "check", "--job", "fenced", "--token", "1")

	// A holder, seen by ls and status, and a waiter woken by its release.
	_, release, holderDone := u.started("run", "--job", "held", "--", "sh", "-c", "echo started; read line; true")
	if !strings.Contains(u.want(0, "ls"), "held") {
		t.Error("ls does not list the held job")
	}
	var st struct{ State string }
	if err := json.Unmarshal([]byte(u.want(0, "status", "held", "--json")), &st); err != nil || st.State != "RUNNING" {
		t.Errorf("status held: %+v, %v; want RUNNING", st, err)
	}
	waiter := u.cmd("run", "--job", "held", "--wait", "--", "echo", "waited")
	var waited bytes.Buffer
	waiter.Stdout = &waited
	if err := waiter.Start(); err != nil {
		t.Fatal(err)
	}
	waiterDone := make(chan error, 1)
	go func() { waiterDone <- waiter.Wait() }()
	time.Sleep(pubsubHealthCheck + time.Second) // the duration under test: the subscription outlives a health check
	release.Close()
	for _, done := range []<-chan error{holderDone, waiterDone} {
		select {
		case err := <-done:
			if err != nil {
				t.Fatalf("holder or waiter: %v", err)
			}
		case <-time.After(hangGuard):
			t.Fatal("the holder or the waiter hung")
		}
	}
	if waited.String() != "waited\n" {
		t.Errorf("the waiter's child printed %q, want waited", waited.String())
	}

	// A crash: the supervisor is SIGKILLed, the lease runs out, the reaper
	// counts it once, and the reaper's metrics read the store-wide counts.
	const ttl = 600 * time.Millisecond
	crashed, _, crashedDone := u.started("run", "--job", "crashy", "--ttl", ttl.String(), "--", "sh", "-c", "echo started; read line; true")
	if err := crashed.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-crashedDone
	time.Sleep(ttl + 300*time.Millisecond) // the lease's liveness runs out on the server's clock
	if out := u.want(0, "scan", "--json"); !strings.Contains(out, `"job": "crashy"`) {
		t.Errorf("scan --json found %s, want the crash of crashy", out)
	}
	u.scanWatch()

	// Quarantine: add, list, show, refuse, release.
	u.want(0, "quarantine", "add", "poison", "--reason", "testing the ACL")
	if !strings.Contains(u.want(0, "quarantine", "list"), "poison") {
		t.Error("quarantine list does not list poison")
	}
	u.want(0, "quarantine", "show", "poison")
	u.want(76, "run", "--job", "poison", "--", "true")
	u.want(0, "quarantine", "release", "poison", "--reason", "done")
	u.want(0, "run", "--job", "poison", "--", "true")
}

// scanWatch runs the reaper with its metrics until a pass has read the
// store-wide counts without an error, then stops it with SIGTERM.
func (u aclUser) scanWatch() {
	t := u.t
	t.Helper()
	cmd := u.cmd("-v", "scan", "--watch", "--interval", "100ms", "--metrics-addr", "127.0.0.1:0")
	stderr, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill() })
	addr := make(chan string, 1)
	go func() {
		re := regexp.MustCompile(`"addr":"([^"]+)"`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m[1]
			}
		}
	}()
	var url string
	select {
	case a := <-addr:
		url = "http://" + a + "/metrics"
	case <-time.After(hangGuard):
		t.Fatal("the reaper never served its metrics")
	}
	// The second pass starts once the first, counts included, is done.
	runs := regexp.MustCompile(`(?m)^leasectl_reaper_runs_total ([2-9]|\d{2,})$`)
	deadline := time.Now().Add(hangGuard)
	for {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if runs.Match(body) {
			if !bytes.Contains(body, []byte("\nleasectl_reaper_errors_total 0\n")) {
				t.Errorf("the reaper's passes failed:\n%s", body)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no reaper pass after %s:\n%s", hangGuard, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Wait(); err != nil {
		t.Errorf("scan --watch after SIGTERM: %v", err)
	}
}

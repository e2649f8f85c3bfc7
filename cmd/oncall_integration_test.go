package cmd

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/leasestore"
)

// The on-call commands against both real stores: the embedded one in a
// temporary folder and a redis-server of the test's own.

// crashTTL is the liveness TTL of the runs these tests let crash: short, so
// that the tests wait little for a lease to expire.
const crashTTL = 150 * time.Millisecond

// expiryMargin is added to crashTTL when waiting for a lease to expire:
// generous, for a loaded 2-core machine.
const expiryMargin = 250 * time.Millisecond

// realStore is one store the tests run against.
type realStore struct {
	url, namespace string
}

var namespaceSeq atomic.Int64

// realStores returns the embedded store in a fresh folder and, on a
// redis-server started for this test, a fresh namespace.
func realStores(t *testing.T) map[string]func(t *testing.T) realStore {
	t.Helper()
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatalf("start redis-server: %v", err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	return map[string]func(t *testing.T) realStore{
		"embedded": func(t *testing.T) realStore {
			return realStore{url: "file://" + t.TempDir(), namespace: "leasectl"}
		},
		"redis": func(*testing.T) realStore {
			return realStore{url: srv.URL, namespace: fmt.Sprintf("oncall%d", namespaceSeq.Add(1))}
		},
	}
}

// open opens a client of rs, as another process would.
func (rs realStore) open(t *testing.T) *leasestore.Store {
	t.Helper()
	s, err := leasestore.Open(context.Background(), rs.url, rs.namespace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// leasectl runs leasectl's command tree in this process against rs and
// returns its stdout, stderr and exit code.
func (rs realStore) leasectl(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errOut bytes.Buffer
	f := NewFactory()
	f.IO = &IOStreams{In: strings.NewReader(""), Out: &out, ErrOut: &errOut}
	root := NewCmdRoot(f)
	root.SetArgs(append([]string{"--store", rs.url, "--namespace", rs.namespace}, args...))
	code := reportError(&errOut, root.ExecuteContext(context.Background()))
	return out.String(), errOut.String(), code
}

// startRun acquires job's lease as a supervisor would.
func startRun(t *testing.T, s *leasestore.Store, job, worker string, ttl time.Duration) *leasestore.Lease {
	t.Helper()
	l, err := s.Acquire(context.Background(), leasestore.AcquireRequest{
		Job: job, Holder: worker, Host: "host-a", PID: 4242, Command: []string{"./job.sh"},
		TTL: ttl, EvidenceTTL: time.Hour, MaxCrashes: 3,
	})
	if err != nil {
		t.Fatalf("acquire %s as %s: %v", job, worker, err)
	}
	return l
}

// crashRun acquires job's lease and lets it expire without a release: a
// supervisor that was SIGKILLed.
func crashRun(t *testing.T, s *leasestore.Store, job, worker string) *leasestore.Lease {
	t.Helper()
	l := startRun(t, s, job, worker, crashTTL)
	time.Sleep(crashTTL + expiryMargin)
	return l
}

type crashLine struct {
	Job         string `json:"job"`
	Worker      string `json:"worker"`
	Token       int64  `json:"token"`
	StaleForMS  int64  `json:"stale_for_ms"`
	Crashes     int    `json:"crashes"`
	Quarantined bool   `json:"quarantined"`
}

func scanJSON(t *testing.T, rs realStore) []crashLine {
	t.Helper()
	out, errOut, code := rs.leasectl(t, "scan", "--json")
	if code != 0 {
		t.Fatalf("scan: exit %d: %s", code, errOut)
	}
	var crashes []crashLine
	if err := json.Unmarshal([]byte(out), &crashes); err != nil {
		t.Fatalf("scan --json printed %q: %v", out, err)
	}
	return crashes
}

func TestOnCallAgainstRealStores(t *testing.T) {
	for name, newStore := range realStores(t) {
		t.Run(name, func(t *testing.T) {
			t.Run("scan reports a crash once and only once", func(t *testing.T) {
				rs := newStore(t)
				s := rs.open(t)
				l := crashRun(t, s, "nightly", "w1")
				startRun(t, s, "healthy", "w2", time.Minute)

				crashes := scanJSON(t, rs)
				if len(crashes) != 1 || crashes[0].Job != "nightly" || crashes[0].Worker != "w1" || crashes[0].Token != l.Token || crashes[0].Crashes != 1 {
					t.Fatalf("first scan found %+v, want nightly's crash by w1 (token %d)", crashes, l.Token)
				}
				if again := scanJSON(t, rs); len(again) != 0 {
					t.Fatalf("second scan found %+v, want nothing: a crash is counted once", again)
				}
				st, err := s.Status(context.Background(), "nightly")
				if err != nil || st.Crashes != 1 || st.State != leasestore.StateIdle {
					t.Fatalf("after the scans: %+v, %v; want IDLE with 1 crash", st, err)
				}
			})

			t.Run("status says a job was never seen until the store knows it", func(t *testing.T) {
				rs := newStore(t)
				if out, errOut, code := rs.leasectl(t, "status", "nigthly"); code != exitFailure || out != "" || !strings.Contains(errOut, "never seen") {
					t.Errorf("status of a job never run: exit %d, stdout %q, stderr %q; want 1 saying it was never seen", code, out, errOut)
				}
				if _, errOut, code := rs.leasectl(t, "quarantine", "add", "nigthly", "--reason", "before any run"); code != 0 {
					t.Fatalf("quarantine add: exit %d, %s", code, errOut)
				}
				if out, errOut, code := rs.leasectl(t, "status", "nigthly"); code != 0 || !strings.Contains(out, "QUARANTINED") {
					t.Errorf("status of a job quarantined before any run: exit %d, stdout %q, stderr %q; want 0 and QUARANTINED", code, out, errOut)
				}
			})

			t.Run("status shows a crash the reaper counted as the last run", func(t *testing.T) {
				rs := newStore(t)
				s := rs.open(t)
				l := startRun(t, s, "nightly", "w1", time.Minute)
				if err := s.Release(context.Background(), l, leasestore.Outcome{Result: leasestore.ResultCompleted, Duration: time.Second}); err != nil {
					t.Fatal(err)
				}
				crashed := crashRun(t, s, "nightly", "w2")
				scanJSON(t, rs)
				out, errOut, code := rs.leasectl(t, "status", "nightly", "--json")
				var st struct {
					LastOutcome struct {
						Result, Worker, Reason string
						Token                  int64
					} `json:"last_outcome"`
				}
				if code != 0 || json.Unmarshal([]byte(out), &st) != nil {
					t.Fatalf("status --json: exit %d, %q, %s", code, out, errOut)
				}
				if o := st.LastOutcome; o.Result != "CRASHED" || o.Worker != "w2" || o.Token != crashed.Token || o.Reason != "supervisor vanished: liveness expired, found by scan" {
					t.Errorf("last outcome %+v, want w2's crash, found by scan", o)
				}
			})

			t.Run("three crashes quarantine the job; release lets it run again", func(t *testing.T) {
				rs := newStore(t)
				s := rs.open(t)
				for i := 1; i <= 3; i++ {
					crashRun(t, s, "poison", fmt.Sprintf("w%d", i))
					crashes := scanJSON(t, rs)
					if len(crashes) != 1 || crashes[0].Crashes != i || crashes[0].Quarantined != (i == 3) {
						t.Fatalf("scan %d found %+v, want crash %d, quarantined at 3", i, crashes, i)
					}
				}
				out, _, code := rs.leasectl(t, "quarantine", "list")
				if code != 0 || !strings.HasPrefix(out, "poison\t3\tw3\thost-a\t") {
					t.Fatalf("quarantine list: exit %d, %q; want poison with 3 crashes, last run by w3 on host-a", code, out)
				}
				var qe *leasestore.QuarantinedError
				if _, err := s.Acquire(context.Background(), leasestore.AcquireRequest{Job: "poison", Holder: "w4", TTL: time.Minute, EvidenceTTL: time.Hour, MaxCrashes: 3}); !errors.As(err, &qe) {
					t.Fatalf("acquire of a quarantined job: %v, want *QuarantinedError", err)
				}

				_, errOut, code := rs.leasectl(t, "quarantine", "release", "poison", "--reason", "fixed the input")
				if code != 0 {
					t.Fatalf("quarantine release: exit %d: %s", code, errOut)
				}
				startRun(t, s, "poison", "w4", time.Minute)
				st, err := s.Status(context.Background(), "poison")
				if err != nil || st.Crashes != 0 || st.State != leasestore.StateRunning {
					t.Fatalf("after release: %+v, %v; want RUNNING with its crash count reset", st, err)
				}
				if !hasEvent(st.History, leasestore.EventUnquarantine, "fixed the input") {
					t.Fatalf("history %+v lacks the release with its reason", st.History)
				}

				_, errOut, code = rs.leasectl(t, "quarantine", "release", "poison")
				if code != exitFailure || !strings.Contains(errOut, `job "poison" is not quarantined`) {
					t.Fatalf("second release: exit %d, %q; want 1 saying it is not quarantined", code, errOut)
				}
			})

			t.Run("quarantine add stops the job", func(t *testing.T) {
				rs := newStore(t)
				s := rs.open(t)
				_, errOut, code := rs.leasectl(t, "quarantine", "add", "billing", "--reason", "upstream broken")
				if code != 0 {
					t.Fatalf("quarantine add: exit %d: %s", code, errOut)
				}
				var qe *leasestore.QuarantinedError
				_, err := s.Acquire(context.Background(), leasestore.AcquireRequest{Job: "billing", Holder: "w1", TTL: time.Minute, EvidenceTTL: time.Hour, MaxCrashes: 3})
				if !errors.As(err, &qe) || qe.Reason != "upstream broken" {
					t.Fatalf("acquire after quarantine add: %v, want *QuarantinedError with the operator's reason", err)
				}
				out, _, code := rs.leasectl(t, "quarantine", "show", "billing", "--json")
				var shown struct {
					Job, Reason string
				}
				if code != 0 || json.Unmarshal([]byte(out), &shown) != nil || shown.Job != "billing" || shown.Reason != "upstream broken" {
					t.Fatalf("quarantine show: exit %d, %q", code, out)
				}
			})

			t.Run("token check tells the current token from the previous one", func(t *testing.T) {
				rs := newStore(t)
				s := rs.open(t)
				prev := crashRun(t, s, "fenced", "w1")
				cur := startRun(t, s, "fenced", "w2", time.Minute)
				tok := func(n int64) []string {
					return []string{"token", "check", "--job", "fenced", "--token", strconv.FormatInt(n, 10)}
				}
				if _, errOut, code := rs.leasectl(t, tok(cur.Token)...); code != 0 {
					t.Fatalf("current token %d: exit %d (%s), want 0", cur.Token, code, errOut)
				}
				_, errOut, code := rs.leasectl(t, tok(prev.Token)...)
				if code != exitFailure || strings.Count(errOut, "\n") != 1 || !strings.Contains(errOut, strconv.FormatInt(cur.Token, 10)) {
					t.Fatalf("previous token %d: exit %d, stderr %q; want 1 and one line naming the current token", prev.Token, code, errOut)
				}
			})

			t.Run("status and ls show the live lease", func(t *testing.T) {
				rs := newStore(t)
				s := rs.open(t)
				l := startRun(t, s, "report", "w1", time.Minute)
				out, _, code := rs.leasectl(t, "ls")
				if want := "report\tw1\thost-a\t" + strconv.FormatInt(l.Token, 10) + "\t"; code != 0 || !strings.HasPrefix(out, want) {
					t.Fatalf("ls: exit %d, %q; want a line starting %q", code, out, want)
				}
				out, _, code = rs.leasectl(t, "status", "report", "--json")
				var st struct {
					State  string `json:"state"`
					Holder *struct {
						Worker    string `json:"worker"`
						TTLLeftMS int64  `json:"ttl_left_ms"`
					} `json:"holder"`
				}
				if code != 0 || json.Unmarshal([]byte(out), &st) != nil || st.State != "RUNNING" || st.Holder == nil || st.Holder.Worker != "w1" ||
					st.Holder.TTLLeftMS <= 0 || st.Holder.TTLLeftMS > time.Minute.Milliseconds() {
					t.Fatalf("status: exit %d, %s", code, out)
				}
			})
		})
	}
}

func hasEvent(history []leasestore.Event, kind leasestore.EventKind, detail string) bool {
	for _, e := range history {
		if e.Kind == kind && strings.Contains(e.Detail, detail) {
			return true
		}
	}
	return false
}

// TestScanWatchBinary runs the built binary as an operator would: the
// reaper finds a crash within ttl + interval, counts it in its metrics, and
// stops with exit status 0 on SIGTERM; `run` obeys `quarantine add`.
func TestScanWatchBinary(t *testing.T) {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	const interval = 200 * time.Millisecond
	for name, newStore := range realStores(t) {
		t.Run(name, func(t *testing.T) {
			rs := newStore(t)
			s := rs.open(t)
			cmd := exec.Command(bin, "--store", rs.url, "--namespace", rs.namespace, "--log-format", "json", "-v",
				"scan", "--watch", "--interval", interval.String(), "--metrics-addr", "127.0.0.1:0", "--json")
			stdout, err := cmd.StdoutPipe()
			if err != nil {
				t.Fatal(err)
			}
			stderr, err := cmd.StderrPipe()
			if err != nil {
				t.Fatal(err)
			}
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = cmd.Process.Kill() })
			addr := make(chan string, 1)
			var logs bytes.Buffer
			logsDone := make(chan struct{})
			go func() {
				defer close(logsDone)
				re := regexp.MustCompile(`"addr":"([^"]+)"`)
				sc := bufio.NewScanner(stderr)
				for sc.Scan() {
					logs.WriteString(sc.Text() + "\n")
					if m := re.FindStringSubmatch(sc.Text()); m != nil {
						addr <- m[1]
					}
				}
			}()
			lines := make(chan string, 16)
			go func() {
				sc := bufio.NewScanner(stdout)
				for sc.Scan() {
					lines <- sc.Text()
				}
				close(lines)
			}()
			metricsURL := "http://" + awaitValue(t, addr, "the metrics address") + "/metrics"

			l := startRun(t, s, "nightly", "w1", crashTTL)
			var c crashLine
			if err := json.Unmarshal([]byte(awaitValue(t, lines, "the crash on stdout")), &c); err != nil {
				t.Fatal(err)
			}
			if c.Job != "nightly" || c.Token != l.Token {
				t.Fatalf("the reaper reported %+v, want nightly's token %d", c, l.Token)
			}
			// Found within the scan interval after its liveness expired
			// (by the store's clock), with a margin for a loaded machine.
			if limit := (interval + time.Second).Milliseconds(); c.StaleForMS > limit {
				t.Errorf("crash found %d ms after its liveness expired, want within the interval (%d ms with margin)", c.StaleForMS, limit)
			}
			body := httpGetBody(t, metricsURL)
			if !regexp.MustCompile(`(?m)^leasectl_recovered_crashes_total 1$`).MatchString(body) {
				t.Errorf("metrics after one crash:\n%s", body)
			}
			if !regexp.MustCompile(`(?m)^leasectl_stale_duration_seconds_count 1$`).MatchString(body) {
				t.Errorf("metrics lack the crash's stale duration:\n%s", body)
			}

			// The operator's kill switch: `run` refuses with 76.
			if _, errOut, code := rs.leasectl(t, "quarantine", "add", "nightly", "--reason", "stop it"); code != 0 {
				t.Fatalf("quarantine add: exit %d: %s", code, errOut)
			}
			run := exec.Command(bin, "--store", rs.url, "--namespace", rs.namespace, "run", "--job", "nightly", "--", "true")
			out, err := run.CombinedOutput()
			var ee *exec.ExitError
			if !errors.As(err, &ee) || ee.ExitCode() != exitQuarantined || !strings.Contains(string(out), "stop it") {
				t.Fatalf("run of a job quarantined by hand: %v, %s; want exit 76 naming the reason", err, out)
			}

			if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
				t.Fatal(err)
			}
			waitErr := make(chan error, 1)
			go func() { <-logsDone; waitErr <- cmd.Wait() }()
			if err := awaitValue(t, waitErr, "scan --watch to stop"); err != nil {
				t.Fatalf("scan --watch after SIGTERM: %v, want exit 0\n%s", err, logs.String())
			}
			if _, err := http.Get(metricsURL); err == nil {
				t.Error("the metrics endpoint still answers after the reaper stopped")
			}
		})
	}
}

func httpGetBody(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// receive waits for one value, failing after a generous hang guard.
func awaitValue[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v, ok := <-ch:
		if !ok {
			t.Fatalf("gave up waiting for %s: the channel closed", what)
		}
		return v
	case <-time.After(15 * time.Second):
		t.Fatalf("timed out waiting for %s", what)
	}
	var zero T
	return zero
}

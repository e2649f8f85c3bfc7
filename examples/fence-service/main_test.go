package main

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/internal/testserver"
)

var (
	testRedis = testserver.Share("test redis-server", redistest.Start, redistest.Options{})
	binDir    string // holds the built fence-service
)

func TestMain(m *testing.M) {
	code := testserver.Run(m, testRedis)
	testenv.Cleanup()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

// binaries builds leasectl and fence-service, as a user would have them.
func binaries(t *testing.T) (leasectl, service string) {
	t.Helper()
	leasectl, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	if binDir == "" {
		if binDir, err = os.MkdirTemp("", "fence-service-"); err != nil {
			t.Fatal(err)
		}
	}
	service = filepath.Join(binDir, "fence-service")
	cmd := exec.Command("go", "build", "-o", service, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return leasectl, service
}

// startService starts `fence-service serve` on a free port and returns its
// base URL once it listens; it is stopped when the test ends.
func startService(t *testing.T, service string, args ...string) string {
	t.Helper()
	cmd := exec.Command(service, append([]string{"serve", "--addr", "127.0.0.1:0"}, args...)...)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	})
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
	}()
	select {
	case l := <-line:
		addr, ok := strings.CutPrefix(strings.TrimSpace(l), "listening on ")
		if !ok {
			t.Fatalf("fence-service printed %q, want its address", l)
		}
		return "http://" + addr
	case <-time.After(10 * time.Second):
		t.Fatal("fence-service did not say where it listens within 10s")
	}
	return ""
}

// The example as a user runs it: two `leasectl run` children write the
// nightly report through the service; the first run's write, delayed until
// after the second run's (a zombie), is refused with 409 and changes
// nothing.
func TestFenceServiceRefusesTheOvertakenRun(t *testing.T) {
	srv := testRedis.Get(t)
	leasectl, service := binaries(t)
	reports := t.TempDir()
	for _, pattern := range []string{"authoritative", "bounded-staleness", "write-through"} {
		t.Run(pattern, func(t *testing.T) {
			ns := "example-" + pattern
			url := startService(t, service, "--store", srv.URL, "--namespace", ns, "--dir", reports, "--pattern", pattern) + "/reports/nightly-" + pattern
			report := filepath.Join(reports, "nightly-"+pattern)
			env := append(os.Environ(), "LEASECTL_STORE="+srv.URL, "LEASECTL_NAMESPACE="+ns)

			// Each run writes its report and leaves its token behind.
			runWrites := func(body string) string {
				t.Helper()
				tokenFile := filepath.Join(t.TempDir(), "token")
				script := fmt.Sprintf(`echo %s | %s put %s && echo "$LEASECTL_FENCING_TOKEN" > %s`, body, service, url, tokenFile)
				cmd := exec.Command(leasectl, "run", "--job", "nightly", "--", "sh", "-c", script)
				cmd.Env = env
				if out, err := cmd.CombinedOutput(); err != nil {
					t.Fatalf("leasectl run writing %q: %v\n%s", body, err, out)
				}
				if got, _ := os.ReadFile(report); strings.TrimSpace(string(got)) != body {
					t.Fatalf("report %q after the run writing %q", got, body)
				}
				token, err := os.ReadFile(tokenFile)
				if err != nil {
					t.Fatal(err)
				}
				return strings.TrimSpace(string(token))
			}
			first := runWrites("first")
			second := runWrites("second")

			zombie := exec.Command(service, "put", url)
			zombie.Env = append(os.Environ(), "LEASECTL_JOB_ID=nightly", "LEASECTL_FENCING_TOKEN="+first)
			zombie.Stdin = strings.NewReader("zombie\n")
			out, err := zombie.CombinedOutput()
			var exit *exec.ExitError
			if !errors.As(err, &exit) || exit.ExitCode() != exitStale {
				t.Fatalf("the zombie's put: %v, want exit %d\n%s", err, exitStale, out)
			}
			if !strings.Contains(string(out), "refused") || !strings.Contains(string(out), second) {
				t.Errorf("the zombie's put said %q, want a refusal naming the newer token %s", out, second)
			}
			if got, _ := os.ReadFile(report); strings.TrimSpace(string(got)) != "second" {
				t.Errorf("report %q after the zombie's write, want the second run's", got)
			}
		})
	}
}

package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/notify"
)

// The event README's Webhooks shows is a leasectl.event/v1 event, and the
// section names every field the webhook sends.
func TestReadmeWebhookBodyIsTheSchema(t *testing.T) {
	text := section(t, "README.md", "### Webhooks")
	m := regexp.MustCompile("(?s)```json\n(.*?)```").FindStringSubmatch(text)
	if m == nil {
		t.Fatal("README's Webhooks has no json block")
	}
	var e notify.Event
	dec := json.NewDecoder(strings.NewReader(m[1]))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&e); err != nil {
		t.Fatalf("README's event is not a notify.Event: %v", err)
	}
	if e.Schema != notify.Schema || !strings.HasPrefix(e.IdempotencyKey, string(e.Kind)+"/"+e.Job+"/") {
		t.Errorf("README's event: schema %q, key %q; want %s and kind/job/id", e.Schema, e.IdempotencyKey, notify.Schema)
	}
	typ := reflect.TypeOf(notify.Event{})
	for i := range typ.NumField() {
		name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
		if !strings.Contains(m[1], `"`+name+`":`) && !strings.Contains(text, "`"+name+"`") {
			t.Errorf("README's Webhooks does not name the field %q", name)
		}
	}
}

// leasectlIn runs the real binary with a fresh embedded store in dir.
func leasectlIn(t *testing.T, dir string, args ...string) *exec.Cmd {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + dir, "XDG_STATE_HOME=" + dir, "LEASECTL_LOG_LEVEL=info"}
	return cmd
}

// exampleArgs are the arguments of README's first `leasectl scan --watch`
// line of section, split as the shell would (single quotes only).
func exampleArgs(t *testing.T, section string) []string {
	t.Helper()
	line := regexp.MustCompile(`(?m)^leasectl (scan --watch .*)$`).FindStringSubmatch(section)
	if line == nil {
		t.Fatal("no leasectl scan --watch line in the section")
	}
	var args []string
	for _, f := range regexp.MustCompile(`'[^']*'|\S+`).FindAllString(line[1], -1) {
		args = append(args, strings.Trim(f, "'"))
	}
	return args
}

// README's worked examples, run as written but for the addresses and paths
// a test owns: a quarantine recorded by `quarantine add` reaches the
// webhook, with its idempotency key, and the command, on its stdin.
func TestReadmeNotificationExamples(t *testing.T) {
	dir := t.TempDir()
	got := make(chan *http.Request, 4)
	bodies := make(chan []byte, 4)
	rcv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- r
		bodies <- b
	}))
	defer rcv.Close()
	if code, _, stderr := testenv.Run(t, leasectlIn(t, dir, "quarantine", "add", "nightly-report", "--reason", "INC-1")); code != 0 {
		t.Fatalf("quarantine add: exit %d: %s", code, stderr)
	}

	args := exampleArgs(t, section(t, "README.md", "### Webhooks"))
	for i, a := range args {
		if strings.HasPrefix(a, "https://alerts.example.com/") {
			args[i] = rcv.URL + "/leasectl"
		}
	}
	p := testenv.Start(t, leasectlIn(t, dir, args...))
	select {
	case r := <-got:
		var e notify.Event
		body := <-bodies
		if err := json.Unmarshal(body, &e); err != nil || e.Kind != "quarantined" || e.Job != "nightly-report" ||
			r.Header.Get(notify.HeaderIdempotencyKey) != e.IdempotencyKey || r.URL.Path != "/leasectl" {
			t.Errorf("the webhook got %s %s (%v), key %q; want nightly-report's quarantine with its key", r.URL.Path, body, err,
				r.Header.Get(notify.HeaderIdempotencyKey))
		}
	case <-time.After(testenv.HangGuard):
		t.Fatal("the webhook never got the quarantine")
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	if code, _ := p.Exit(); code != 0 {
		t.Fatalf("scan --watch ended with exit %d after SIGTERM", code)
	}

	if code, _, stderr := testenv.Run(t, leasectlIn(t, dir, "quarantine", "release", "nightly-report")); code != 0 {
		t.Fatalf("quarantine release: exit %d: %s", code, stderr)
	}
	events := filepath.Join(dir, "events.jsonl")
	args = exampleArgs(t, section(t, "README.md", "### A command per event"))
	for i, a := range args {
		// syslog is the host's: the test keeps the file, and drops the rest.
		args[i] = strings.NewReplacer("/var/log/leasectl/events.jsonl", events, "jq -r .text | logger -t leasectl", "cat >/dev/null").Replace(a)
	}
	p = testenv.Start(t, leasectlIn(t, dir, args...))
	for guard := time.Now().Add(testenv.HangGuard); ; time.Sleep(20 * time.Millisecond) {
		raw, _ := os.ReadFile(events)
		if bytes.Contains(raw, []byte(`"kind":"quarantine-released"`)) {
			var e notify.Event
			if err := json.Unmarshal(bytes.TrimSpace(raw), &e); err != nil || e.Job != "nightly-report" || e.Schema != notify.Schema {
				t.Errorf("the command kept %s (%v); want the release of nightly-report alone, as leasectl.event/v1", raw, err)
			}
			break
		}
		if time.Now().After(guard) {
			t.Fatalf("the command never kept the release; the file holds %q", raw)
		}
	}
	_ = p.Cmd.Process.Signal(syscall.SIGTERM)
	p.Exit()
}

// The figures README's notifications give are the code's.
func TestReadmeNotificationFigures(t *testing.T) {
	text := strings.Join(strings.Fields(section(t, "README.md", "## Alerting")), " ")
	for _, want := range []string{
		fmt.Sprintf("`--notify-timeout` (%d s)", notify.DefaultTimeout/time.Second),
		fmt.Sprintf("after %d s, doubling up to %d minutes", notify.DefaultBackoff/time.Second, notify.DefaultMaxBackoff/time.Minute),
		fmt.Sprintf("keeps events %d days, at most %s", leasestore.NoticeRetention/(24*time.Hour), thousands(leasestore.NoticeCap)),
	} {
		if !strings.Contains(text, want) {
			t.Errorf("README's Alerting does not say %q", want)
		}
	}
}

// thousands writes n with a comma every three digits.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

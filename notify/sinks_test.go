package notify

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

func TestBackoff(t *testing.T) {
	tests := []struct {
		name     string
		attempts int
		jitter   float64
		want     time.Duration
	}{
		{"the first retry waits the base", 1, 0, 5 * time.Second},
		{"each attempt doubles it", 3, 0, 20 * time.Second},
		{"up to the ceiling", 30, 0, 10 * time.Minute},
		{"jitter takes up to a half off", 2, 0.5, 7500 * time.Millisecond},
		{"never more than a half", 2, 0.999999, 5*time.Second + 10*time.Microsecond},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Backoff(tt.attempts, 0, 0, tt.jitter)
			if got.Round(100*time.Microsecond) != tt.want.Round(100*time.Microsecond) {
				t.Errorf("Backoff(%d, jitter %g) = %s, want %s", tt.attempts, tt.jitter, got, tt.want)
			}
		})
	}
}

func sampleEvent() Event {
	return EventOf(leasestore.Notice{Key: "crash/nightly/7", Kind: leasestore.NoticeCrash, Job: "nightly",
		At: time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC), Token: 7, Crashes: 2, Detail: "job nightly crashed", Attempts: 1}, "prod")
}

// --notify-format slack sends Slack's incoming-webhook body: {"text": ...}
// and nothing else.
func TestSlackBody(t *testing.T) {
	rcv := newReceiver(t)
	if err := webhook(t, rcv.URL, FormatSlack).Send(storetest.Ctx(t), sampleEvent()); err != nil {
		t.Fatal(err)
	}
	var body map[string]any
	got := rcv.events()
	if err := json.Unmarshal(got[0].body, &body); err != nil {
		t.Fatal(err)
	}
	if len(body) != 1 || body["text"] != "*leasectl crash* (prod): job nightly crashed" {
		t.Errorf("slack body %s, want {\"text\": \"*leasectl crash* (prod): job nightly crashed\"}", got[0].body)
	}
	if got[0].header.Get(HeaderIdempotencyKey) != "crash/nightly/7" {
		t.Errorf("Idempotency-Key %q, want the event's key", got[0].header.Get(HeaderIdempotencyKey))
	}
}

// A webhook's path and query are often its secret: no error shows them.
func TestWebhookErrorsHideTheURLsSecrets(t *testing.T) {
	rcv := newReceiver(t)
	rcv.down.Store(true)
	for _, url := range []string{rcv.URL + "/services/T0/B0/s3cr3t?token=t0ken", "http://127.0.0.1:1/services/s3cr3t?token=t0ken"} {
		err := webhook(t, url, FormatJSON).Send(storetest.Ctx(t), sampleEvent())
		if err == nil || strings.Contains(err.Error(), "s3cr3t") || strings.Contains(err.Error(), "t0ken") {
			t.Errorf("Send to a failing webhook = %v; want an error without the URL's path or query", err)
		}
	}
	if _, err := NewWebhook("ftp://example.com/x", FormatJSON, nil, ""); err == nil {
		t.Errorf("NewWebhook accepted an ftp URL")
	}
}

// A sink's ID is the same for the same configuration, built again (on
// another reaper, after a restart), tells apart two sinks of one name, and
// holds none of their secrets.
func TestSinkIDs(t *testing.T) {
	secret := "https://hooks.slack.com/services/T0/B0/s3cr3t"
	a, b := webhook(t, secret, FormatJSON), webhook(t, secret, FormatSlack)
	other := webhook(t, "https://hooks.slack.com/services/T0/B0/0ther", FormatJSON)
	c1, _ := NewCommand("TOKEN=s3cr3t alert")
	c2, _ := NewCommand("TOKEN=s3cr3t alert")
	c3, _ := NewCommand("TOKEN=0ther alert")
	if a.ID() != b.ID() || c1.ID() != c2.ID() {
		t.Errorf("IDs of one configuration differ: %q %q, %q %q", a.ID(), b.ID(), c1.ID(), c2.ID())
	}
	for _, s := range []Sink{a, other, c1, c3} {
		if strings.Contains(s.ID(), "s3cr3t") || strings.Contains(s.ID(), "0ther") || !strings.HasPrefix(s.ID(), s.String()+"#") ||
			len(s.ID()) > leasestore.MaxSinkID {
			t.Errorf("ID %q of %s; want its name, a hash, no secret", s.ID(), s)
		}
	}
	if a.ID() == other.ID() || c1.ID() == c3.ID() {
		t.Errorf("two sinks of one name share an ID: %q, %q", a.ID(), c1.ID())
	}
}

// A command sink gets the event's JSON on stdin; exit status 0 is
// delivery.
func TestCommandSink(t *testing.T) {
	out := filepath.Join(t.TempDir(), "event.json")
	ok, err := NewCommand("cat > " + out)
	if err != nil {
		t.Fatal(err)
	}
	if err := ok.Send(storetest.Ctx(t), sampleEvent()); err != nil {
		t.Fatalf("Send: %v", err)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var e Event
	if err := json.Unmarshal(raw, &e); err != nil || e.IdempotencyKey != "crash/nightly/7" || e.Schema != Schema {
		t.Errorf("the command read %s (%v); want the event's JSON", raw, err)
	}
	if _, err := NewCommand("  "); err == nil {
		t.Errorf("NewCommand accepted an empty command")
	}
}

// A command's name and its errors, which go to logs and into the store
// any reader may read, hold none of its secrets: not its assignments, not
// its arguments, not what it wrote on stderr (that goes to the debug log
// alone).
func TestCommandSinkHidesItsSecrets(t *testing.T) {
	names := []struct{ line, want string }{
		{"SLACK_TOKEN=xoxb-secret /usr/local/bin/alert --token xoxb-secret", "command alert"},
		{"A=1 B=xoxb-secret pager", "command pager"},
		{"tee -a /var/log/events.jsonl | logger", "command tee"},
		{`"$(cat /etc/xoxb-secret)" x`, "command"},
		{"TOKEN=xoxb-secret", "command"},
	}
	for _, n := range names {
		c, err := NewCommand(n.line)
		if err != nil {
			t.Fatal(err)
		}
		if got := c.String(); got != n.want {
			t.Errorf("NewCommand(%q).String() = %q, want %q", n.line, got, n.want)
		}
	}
	var debug strings.Builder
	failing, _ := NewCommand("TOKEN=xoxb-secret; echo \"token $TOKEN rejected\" >&2; exit 3")
	failing.Log = zerolog.New(&debug).Level(zerolog.DebugLevel)
	err := failing.Send(storetest.Ctx(t), sampleEvent())
	if err == nil || err.Error() != "exit status 3" {
		t.Errorf("Send of a failing command = %v; want its exit status alone", err)
	}
	if !strings.Contains(debug.String(), "token xoxb-secret rejected") {
		t.Errorf("debug log %q; want the command's last words on stderr", debug.String())
	}
}

// A hung sink costs each notice its timeout, then the notice is due again
// later, its error kept: delivery moves on.
func TestHungSinkIsBoundedByItsTimeout(t *testing.T) {
	s := openStore(t, t.TempDir())
	if err := s.PutNotices(storetest.Ctx(t), []leasestore.Notice{{Key: "crash/j/1", Kind: leasestore.NoticeCrash, Job: "j", At: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	d := deliverer(s, "reaper", &blocking{entered: make(chan struct{}, 1)})
	d.Timeout, d.Backoff, d.MaxBackoff = 50*time.Millisecond, time.Hour, time.Hour
	start := time.Now()
	if err := d.Pass(storetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > storetest.HangGuard {
		t.Errorf("a pass over a hung sink took %s", took)
	}
	kept, err := s.ListNotices(storetest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	if n := kept[0]; n.Sent() || !strings.Contains(n.LastError, "blocking sink") || n.NextAt.Before(time.Now().Add(30*time.Minute)) {
		t.Errorf("notice after a hung sink: sent %v, error %q, next at %s; want unsent, the sink named, retried in about an hour",
			n.Sent(), n.LastError, n.NextAt)
	}
}

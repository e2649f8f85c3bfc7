package registry

import (
	"net/http"
	"testing"
	"time"

	"github.com/leasectl/leasectl/clock/fakeclock"
	"github.com/leasectl/leasectl/registry/api"
)

// A request whose sender's deadline, on the registry's clock, passed before
// it arrived (it waited in the network or in a queue) is refused without
// being run: the store sees no acquire. One that arrives in time, or names
// the clock of another registry process (a restart), is run. Every answer
// carries the clock, refusals included.
func TestRequestsPastTheirSendersDeadlineAreNotRun(t *testing.T) {
	clock := fakeclock.New(time.Date(2026, 11, 26, 23, 0, 0, 0, time.UTC))
	store := newFakeStore(t)
	srv := newTestServer(t, store, func(c *Config) { c.Clock = clock })
	read := func(a answer) api.Clock {
		t.Helper()
		c, ok := api.ParseClock(a.header.Get(api.HeaderClock))
		if !ok {
			t.Fatalf("answer %d without the registry's clock (%q)", a.status, a.header.Get(api.HeaderClock))
		}
		return c
	}
	now := read(request(t, srv.url, http.MethodGet, api.PathHealth, "", nil))
	// The sender will wait 100 ms for the answer; the request takes 250 ms
	// to arrive.
	deadline := api.Clock{Instance: now.Instance, Micros: now.Micros + (100 * time.Millisecond).Microseconds()}
	clock.Advance(250 * time.Millisecond)
	late := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Minute),
		api.HeaderDeadline, deadline.String())
	if e := late.err(t); e.Code != api.CodeRequestExpired || late.status != http.StatusRequestTimeout {
		t.Fatalf("an acquire 150 ms past its deadline: %d %+v, want 408 %s", late.status, e, api.CodeRequestExpired)
	}
	if n := store.count("acquire"); n != 0 {
		t.Fatalf("the store saw %d acquires of a request past its deadline, want none", n)
	}
	if got := read(late); got.Micros != now.Micros+(250*time.Millisecond).Microseconds() {
		t.Errorf("the refusal's clock %+v, want 250 ms after %+v", got, now)
	}

	for name, d := range map[string]api.Clock{
		"in time":                  {Instance: now.Instance, Micros: read(late).Micros + 1},
		"another registry process": {Instance: "restarted", Micros: 0},
	} {
		before := store.count("acquire")
		a := request(t, srv.url, http.MethodPost, api.PathAcquire, workerToken, acquireBody("j", "w", time.Minute),
			api.HeaderDeadline, d.String())
		if a.status != http.StatusOK || store.count("acquire") != before+1 {
			t.Errorf("an acquire %s: %d %s, %d store calls; want it run", name, a.status, a.body, store.count("acquire")-before)
		}
	}
}

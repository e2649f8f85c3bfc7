package etcdstore

import (
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/internal/faultproxy"
)

// silentArgs are the runs' timing in TestFaultSilentMember, the issue's:
// a renewal every second, the child killed 3 s after the last confirmed
// renewal's send time.
var silentArgs = []string{"--ttl", "6s", "--heartbeat", "1s", "--safety", "3s"}

// silentFor is how long the member stays silent: three safety windows.
const silentFor = 9 * time.Second

// newRuns is how many runs start, one after the other, while the member is
// silent: the first at once, before any note says it is silent.
const newRuns = 10

// newRunWithin is how soon a run started while the member is silent must
// have its child started: the hedge bound (500 ms) and a few requests,
// where a run that waits on the silent member takes --safety (3 s) or more.
const newRunWithin = time.Second

// TestFaultSilentMember silences a follower that every run lists first,
// by freezing it (SIGSTOP) or by a proxy that stops forwarding without
// closing (a blackhole), for three safety windows, while two runs hold
// leases and new runs start one after the other: the holders keep their
// leases, each new run's child starts within newRunWithin with a token
// above the last, and the holders end as the operator stops them.
func TestFaultSilentMember(t *testing.T) {
	for _, fault := range []string{"frozen", "blackholed"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			c := cluster3(t)
			l := leader(t, c)
			var follower *etcdtest.Member
			others := []string{}
			for _, m := range c.Members {
				if m != l && follower == nil {
					follower = m
					continue
				}
				others = append(others, strings.TrimPrefix(m.ClientURL, "http://"))
			}
			silentAddr := strings.TrimPrefix(follower.ClientURL, "http://")
			var proxy *faultproxy.Proxy
			if fault == "blackholed" {
				var err error
				if proxy, err = faultproxy.Start(silentAddr); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { proxy.Close() })
				silentAddr = proxy.Addr()
			}
			url := "etcd://" + strings.Join(append([]string{silentAddr}, others...), ",")
			state, ns := t.TempDir(), freshNamespace()

			var holders []*proc
			last := int64(0)
			for _, job := range []string{"held1", "held2"} {
				h := runIn(t, state, url, ns, job, silentArgs...)
				last = max(last, h.token())
				holders = append(holders, h)
			}
			silenced := time.Now()
			if proxy != nil {
				proxy.Set(faultproxy.DropBoth)
			} else {
				if err := follower.Freeze(); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { follower.Thaw() })
			}
			var slowest time.Duration
			pace := time.NewTicker(silentFor / newRuns)
			defer pace.Stop()
			for runs := 1; runs <= newRuns; runs++ {
				if runs > 1 {
					<-pace.C
				}
				started := time.Now()
				p := runIn(t, state, url, ns, "next", silentArgs...)
				tok := p.token()
				took := time.Since(started)
				slowest = max(slowest, took)
				if took > newRunWithin {
					t.Errorf("run %d, %s into the silence, started its child after %s, want within %s",
						runs, started.Sub(silenced).Round(time.Millisecond), took.Round(time.Millisecond), newRunWithin)
				}
				if tok <= last {
					t.Errorf("run %d got token %d, want above %d", runs, tok, last)
				}
				last = tok
				if code := p.stop(); code != 143 {
					t.Fatalf("run %d stopped by SIGTERM exited %d, want 143", runs, code)
				}
			}
			<-pace.C
			t.Logf("%d runs started while a member was %s for %s; the slowest child started %s after its run",
				newRuns, fault, time.Since(silenced).Round(time.Millisecond), slowest.Round(time.Millisecond))
			for i, h := range holders {
				select {
				case <-h.Done():
					code, _ := h.Exit()
					t.Fatalf("holder %d exited %d while one of three members was %s, want it to hold on", i+1, code, fault)
				default:
				}
			}
			if proxy != nil {
				proxy.Set(faultproxy.Pass)
			} else if err := follower.Thaw(); err != nil {
				t.Fatal(err)
			}
			for i, h := range holders {
				if code := h.stop(); code != 143 {
					t.Fatalf("holder %d stopped by SIGTERM exited %d, want 143", i+1, code)
				}
			}
		})
	}
}

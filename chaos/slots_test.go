package chaos

import (
	"maps"
	"math/rand/v2"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/faultproxy"
	"github.com/leasectl/leasectl/internal/registrytest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
)

// The slots mode: twice chaosSlots workers loop `leasectl run --wait
// --slots 3` on one job, under the faults of the store's one-slot mode.
// At most chaosSlots children may be alive at once, tokens follow the
// grant order (fencing), no run waits past waitBound, and no run whose
// worker did not die is counted as a crash. It runs on every kind of store.
const chaosSlots = 3

// slotsMode is the slots mode on one kind of store.
type slotsMode struct {
	name string
	// outage is the longest one of the store's faults keeps it from
	// answering (waitBound); 0: none of them silences it, so no waiter's
	// place can lapse, and a run served out of order (overtakes) fails
	// the test.
	outage time.Duration
	// setUp starts the store and returns a harness on it, with the
	// store's own faults.
	setUp func(t *testing.T) (*harness, []fault)
}

// supervisorFaults are the faults of the supervisors, children and waiters
// every mode injects; stopped supervisors twice as often, as in TestChaos.
var supervisorFaults = []fault{killSupervisor, stopSupervisor, stopSupervisor, killChild, killWaiter}

var slotsModes = []slotsMode{
	{"embedded", 0, func(t *testing.T) (*harness, []fault) {
		return newHarness(t, "chaos-slots", "file://"+t.TempDir()), nil
	}},
	// The registry grants what the embedded store behind it grants.
	{"registry", time.Second + 200*time.Millisecond, func(t *testing.T) (*harness, []fault) {
		store, err := filestore.Open(t.TempDir(), "chaos")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		reg := registrytest.Start(t, leasestore.New(store), "chaos")
		p, err := faultproxy.Start(strings.TrimPrefix(reg.URL, "https://"))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		h := newHarness(t, "chaos-slots", "https://"+p.Addr())
		// An operator's token: the outbox's delivery at the end scans.
		h.env = []string{"LEASECTL_TOKEN=" + registrytest.OperatorToken, "LEASECTL_CA_FILE=" + reg.Certs.CA}
		return h, []fault{dropReplies(p), blackhole(p)}
	}},
	{"redis", time.Second + 200*time.Millisecond, func(t *testing.T) (*harness, []fault) {
		h, srv, p := newProxiedRedisHarness(t, "chaos-slots")
		return h, []fault{freezeRedis(srv), dropReplies(p)}
	}},
	// A restart of PostgreSQL takes a second or two on a loaded machine.
	{"postgres", 3 * time.Second, func(t *testing.T) (*harness, []fault) {
		h, pg := newPostgresHarness(t, "chaos-slots")
		return h, postgresFaults(pg)
	}},
	// A leader's death costs an election, and every lease a full TTL again.
	{"etcd", 4 * time.Second, func(t *testing.T) (*harness, []fault) {
		h, c, p := newEtcdHarness(t, "chaos-slots")
		return h, append(leaderFaults(c), silentMemberFaults(c, p)...)
	}},
}

// blackhole makes p forward nothing and close nothing for 200 ms to 1.2 s:
// the store is silent, as a host whose network went away.
func blackhole(p *faultproxy.Proxy) fault {
	return fault{"blackhole", func(_ *harness, rng *rand.Rand) (bool, error) {
		p.Set(faultproxy.DropBoth)
		time.Sleep(pause(rng, 200*time.Millisecond, 1200*time.Millisecond))
		p.Set(faultproxy.Pass)
		return true, nil
	}}
}

// TestChaosSlots is the slots mode on every kind of store.
func TestChaosSlots(t *testing.T) {
	for _, m := range slotsModes {
		t.Run(m.name, func(t *testing.T) {
			h, faults := m.setUp(t)
			h.slots, h.loops, h.outage = chaosSlots, 2*chaosSlots, m.outage
			// A starved waiter shows only in a run longer than waitBound.
			d := max(duration(t)/2, h.waitBound()+5*time.Second)
			h.chaos(d, append(slices.Clone(supervisorFaults), faults...), exactCrashes)
		})
	}
}

// waited is when a run was started, when its child announced itself (0:
// never) and when it exited, in CLOCK_MONOTONIC ns, and whether a fault
// cut its wait short (a waiter SIGKILLed).
type waited struct {
	asked, served, ended int64
	cut                  bool
}

// waitBound is how long a run of the slots mode may wait for a slot. FIFO
// puts at most loops-1 runs ahead of it: a live one per other worker (a
// dead run's lease lapses within a TTL and its place in the queue with it,
// its worker's next run queues behind). A slot passes on within one
// round: its holder's child ends within maxChildRun, or the lease of a
// supervisor killed or frozen lapses within a TTL, and a store fault may
// hold the handoff up for an outage. Slots are served chaosSlots at a time,
// so the run is served within rounds = ceil((loops-slots)/slots) + 1
// (the one it asked in) of them. On top: a TTL for waiters ahead that
// died (their places lapse together), and 3 s for leasectl's start-ups and
// handoffs on a loaded 2-core machine.
func (h *harness) waitBound() time.Duration {
	rounds := (h.loops-h.slots+h.slots-1)/h.slots + 1
	return time.Duration(rounds)*(maxChildRun+h.timing.ttl+h.outage) + h.timing.ttl + 3*time.Second
}

// checkWaits fails the test for every run that waited past waitBound for
// its child to start, served or not (a run still waiting at the end waited
// until then); the runs whose wait a fault cut short are left out.
func (h *harness) checkWaits() {
	bound := h.waitBound()
	// shown are the worker IDs, quoted as in the logs, of the runs whose
	// log lines a failure shows: the starved, and those of an overtake.
	var shown []string
	defer func() { h.logLinesWith(shown) }()
	h.mu.Lock()
	defer h.mu.Unlock()
	var waits []time.Duration
	served := 0
	for cmd, w := range h.waits {
		if w.cut {
			continue
		}
		end := w.served
		if end == 0 {
			end = w.ended
		} else {
			served++
		}
		d := time.Duration(end - w.asked)
		waits = append(waits, d)
		if d > bound {
			h.t.Errorf("starved: run %s waited %s for a slot (served: %t), past the bound %s", h.workerIDs[cmd], d.Round(time.Millisecond), w.served != 0, bound)
			shown = append(shown, `"`+h.workerIDs[cmd]+`"`)
		}
	}
	slices.Sort(waits)
	if len(waits) == 0 {
		h.t.Errorf("no run waited")
		return
	}
	cmds := slices.Collect(maps.Keys(h.waits))
	ws := make([]*waited, len(cmds))
	for i, cmd := range cmds {
		ws[i] = h.waits[cmd]
	}
	pairs := overtakes(ws)
	n := len(pairs)
	h.t.Logf("waits: %d runs (%d served), median %s, p99 %s, longest %s; bound %s; overtakes=%d",
		len(waits), served, waits[len(waits)/2].Round(time.Millisecond), waits[len(waits)*99/100].Round(time.Millisecond),
		waits[len(waits)-1].Round(time.Millisecond), bound, n)
	if h.outage == 0 && n > 0 {
		h.t.Errorf("%d overtakes: runs served while a run started at least %s earlier still waited, on a store no fault silences", n, overtakeGap)
		for _, p := range pairs {
			a, b := h.workerIDs[cmds[p[0]]], h.workerIDs[cmds[p[1]]]
			h.t.Errorf("run %s was served while run %s, started earlier, still waited", b, a)
			shown = append(shown, `"`+a+`"`, `"`+b+`"`)
		}
	}
}

// overtakeGap is how much earlier than another a run must have been
// started for overtakes to count it as ahead in the queue: ample for its
// first request to reach the store first, on a loaded machine.
const overtakeGap = time.Second

// overtakes returns the pairs of runs (indexes into ws: the one still
// waiting, then the one served) in which one was served while the other,
// started at least overtakeGap earlier, still waited: a queue out of order. Where a store's faults silence it, it is a figure, not a
// failure: a waiter's place may lapse (the store silent past its TTL) and
// the waiter rejoins at the tail, which the records cannot tell from a
// queue served out of order.
func overtakes(ws []*waited) [][2]int {
	var pairs [][2]int
	for j, b := range ws {
		for i, a := range ws {
			aDone := a.served
			if aDone == 0 {
				aDone = a.ended
			}
			if b.served != 0 && a.asked+int64(overtakeGap) <= b.asked && aDone > b.served {
				pairs = append(pairs, [2]int{i, j})
			}
		}
	}
	return pairs
}

// TestChaosSlotsCatchesAnExtraChild is the slots mode's negative control:
// four runs of a job granted four slots, whose children overlap, break
// the limit of three that the check is given, and keep that of four.
func TestChaosSlotsCatchesAnExtraChild(t *testing.T) {
	h := newHarness(t, "chaos-extra", "file://"+t.TempDir())
	h.slots = chaosSlots + 1
	started := make(chan int, h.slots)
	var runs []*exec.Cmd
	var outs []<-chan struct{}
	for range h.slots {
		// Long enough for every child to start while the others run.
		cmd := h.command("3s")
		out, err := h.start(cmd, func(pid int) { started <- pid })
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill() })
		runs, outs = append(runs, cmd), append(outs, out)
	}
	for range h.slots {
		select {
		case <-started:
		case <-time.After(hangGuard):
			t.Fatal("the four children never all started")
		}
	}
	for i, cmd := range runs {
		h.wait(cmd, outs[i])
	}
	hs, err := readHolders(h.records)
	if err != nil {
		t.Fatal(err)
	}
	over, within := violations(hs, chaosSlots, true), violations(hs, chaosSlots+1, true)
	t.Logf("negative control: holders=%d, against %d slots: %q", len(hs), chaosSlots, over)
	if len(hs) != h.slots || len(over) == 0 || len(within) != 0 {
		t.Errorf("%d holders; %d violations against %d slots (want some), %d against %d (want none: %q)",
			len(hs), len(over), chaosSlots, len(within), chaosSlots+1, within)
	}
}

func TestOvertakes(t *testing.T) {
	s := int64(time.Second)
	tests := []struct {
		name string
		ws   []*waited
		want int
	}{
		{"served in order", []*waited{{asked: 0, served: 1 * s}, {asked: 2 * s, served: 3 * s}}, 0},
		{"the later one first", []*waited{{asked: 0, served: 5 * s}, {asked: 2 * s, served: 3 * s}}, 1},
		{"the earlier one never served", []*waited{{asked: 0, ended: 10 * s}, {asked: 2 * s, served: 3 * s}}, 1},
		{"the earlier one gone before", []*waited{{asked: 0, ended: 2 * s, cut: true}, {asked: 2 * s, served: 3 * s}}, 0},
		{"started too close to tell", []*waited{{asked: 0, served: 5 * s}, {asked: s / 2, served: 3 * s}}, 0},
	}
	for _, tt := range tests {
		if got := len(overtakes(tt.ws)); got != tt.want {
			t.Errorf("%s: %d overtakes, want %d", tt.name, got, tt.want)
		}
	}
}

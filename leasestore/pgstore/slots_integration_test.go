//go:build linux

package pgstore

import (
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// slotScript reports the child's slot and token, then waits for a line on
// stdin.
const slotScript = `echo slot $LEASECTL_SLOT; echo token $LEASECTL_FENCING_TOKEN; read x`

// TestRunSlotsAndWaitersOnPostgres drives the built binary as the issue's
// users would: two runs of a job of two slots hold it, four --wait runs,
// started one after another, each get a slot in the order they started
// waiting as the slots come free, with tokens rising in that order, and a
// run asking for another number of slots is a usage error.
func TestRunSlotsAndWaitersOnPostgres(t *testing.T) {
	srv := testPG.Get(t)
	ns := freshNamespace()
	s := openPG(t, srv.URL, ns)
	run := func(worker string, wait bool) *running {
		args := append([]string{"run", "--job", "encode", "--slots", "2", "--worker-id", worker}, timing(ttl, heartbeat, safety)...)
		if wait {
			args = append(args, "--wait")
		}
		return start(t, leasectl(t, srv.URL, ns, append(args, "--", "sh", "-c", slotScript)...))
	}
	started := func(r *running) (slot int, token int64) {
		t.Helper()
		v, _ := r.Expect("slot ")
		slot, _ = strconv.Atoi(v)
		v, _ = r.Expect("token ")
		token, _ = strconv.ParseInt(v, 10, 64)
		return slot, token
	}
	// awaitStatus waits until the job's holders and queue are these.
	awaitStatus := func(holders, queue []string) {
		t.Helper()
		var st *leasestore.JobStatus
		for guard := time.Now().Add(testenv.HangGuard); ; time.Sleep(10 * time.Millisecond) {
			st = storetest.Status(t, s, "encode")
			var got, waiting []string
			for _, h := range st.Holders {
				got = append(got, h.Worker)
			}
			for _, w := range st.Queue {
				waiting = append(waiting, w.Worker)
			}
			slices.Sort(got)
			if slices.Equal(got, holders) && slices.Equal(waiting, queue) {
				return
			}
			if time.Now().After(guard) {
				t.Fatalf("holders %v, queue %v after %s; want %v holding, %v waiting", got, waiting, testenv.HangGuard, holders, queue)
			}
		}
	}

	h0, h1 := run("h0", false), run("h1", false)
	s0, _ := started(h0)
	s1, _ := started(h1)
	if s0+s1 != 1 {
		t.Fatalf("the holders run in slots %d and %d, want 0 and 1", s0, s1)
	}
	names := []string{"w1", "w2", "w3", "w4"}
	var waiters []*running
	for i, name := range names {
		waiters = append(waiters, run(name, true))
		awaitStatus([]string{"h0", "h1"}, names[:i+1])
	}
	code, _, stderr := testenv.Run(t, leasectl(t, srv.URL, ns, "run", "--job", "encode", "--slots", "3", "--", "true"))
	if code != 64 {
		t.Errorf("a run asking for 3 slots of a job running in 2: exit %d (%s), want 64", code, stderr)
	}

	// Each slot freed goes to the oldest waiter, in the freed slot.
	var last int64
	serve := func(i int, freed *running, freedSlot int, holders []string) int {
		t.Helper()
		if code := freed.finish(); code != 0 {
			t.Fatalf("a run exited %d, want 0", code)
		}
		slot, token := started(waiters[i])
		if slot != freedSlot || token <= last {
			t.Errorf("%s got slot %d, token %d; want the freed slot %d, a token above %d", names[i], slot, token, freedSlot, last)
		}
		last = token
		awaitStatus(holders, names[i+1:])
		return slot
	}
	w1 := serve(0, h0, s0, []string{"h1", "w1"})
	w2 := serve(1, h1, s1, []string{"w1", "w2"})
	serve(2, waiters[0], w1, []string{"w2", "w3"})
	serve(3, waiters[1], w2, []string{"w3", "w4"})
	for _, w := range waiters[2:] {
		if code := w.finish(); code != 0 {
			t.Errorf("a waiter exited %d, want 0", code)
		}
	}
}

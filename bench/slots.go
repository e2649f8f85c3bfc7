//go:build linux

package main

import (
	"cmp"
	"fmt"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"

	"github.com/leasectl/leasectl/internal/pgtest"
)

// The figures of slots and of FIFO waiting (issue 24). The quick run takes
// the embedded store and Redis, the full one the registry, PostgreSQL and
// etcd too.
const (
	// fifoWaiters wait on one job for the arrival-order figure.
	fifoWaiters = 50
	// slotsCompared is the --slots whose `run -- true` is timed against
	// --slots 1.
	slotsCompared = 3
)

// slotsStore is a store the slots figures run against.
type slotsStore struct {
	name string
	url  string   // the runs' --store ("": the embedded store)
	env  []string // more environment of the runs: a registry's token
}

// run is a leasectl command on s.
func (s slotsStore) run(b *bench, args ...string) *exec.Cmd {
	cmd := b.leasectlAt(s.url, args...)
	cmd.Env = append(cmd.Env, s.env...)
	return cmd
}

// slotsFigures measures, on the embedded store and Redis: the handoff to
// the first of two FIFO waiters against the handoff to a lone waiter,
// interleaved; `run --slots 3 -- true` against `--slots 1`; and 50
// waiters on one job served in arrival order.
func (b *bench) slotsFigures() error {
	for _, s := range []slotsStore{
		{name: "embedded"},
		{name: "redis", url: b.redis.URL},
	} {
		if err := b.slotsCost(s); err != nil {
			return err
		}
		if err := b.fifoFigures(s); err != nil {
			return err
		}
	}
	return nil
}

// slotsStoreFigures is fifoFigures on the registry (serving the embedded
// store), PostgreSQL and etcd.
func (b *bench) slotsStoreFigures() error {
	for _, fig := range []func() error{b.registryFIFO, b.postgresFIFO, b.etcdFIFO} {
		if err := fig(); err != nil {
			return err
		}
	}
	return nil
}

// registryFIFO runs fifoFigures through a `leasectl serve` in front of an
// embedded store of its own.
func (b *bench) registryFIFO() error {
	srv, url, certs, err := b.startServe("registry-fifo", "file://"+filepath.Join(b.tmp, "registry-fifo", "store"))
	if err != nil {
		return err
	}
	defer stopServer(srv)
	s := slotsStore{name: "registry", url: url}
	s.env = []string{"LEASECTL_TOKEN=" + registryToken, "LEASECTL_CA_FILE=" + certs.CA, "LEASECTL_NAMESPACE=" + registryNamespace}
	return b.fifoFigures(s)
}

// postgresFIFO runs fifoFigures on a PostgreSQL of its own.
func (b *bench) postgresFIFO() error {
	srv, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		fmt.Printf("# slots_postgres skipped: %v\n", err)
		return nil
	}
	defer srv.Stop()
	return b.fifoFigures(slotsStore{name: "postgres", url: srv.URL})
}

// etcdFIFO runs fifoFigures on the bench's etcd, when it runs.
func (b *bench) etcdFIFO() error {
	if b.etcd == nil {
		fmt.Println("# slots_etcd skipped: etcd is not running")
		return nil
	}
	return b.fifoFigures(slotsStore{name: "etcd", url: b.etcdStoreURL()})
}

// slotsCost times `run --slots 3 -- true` against `run --slots 1 -- true`
// on s, interleaved, each on a job of its own (a job's runs agree on
// their slots).
func (b *bench) slotsCost(s slotsStore) error {
	one, three := "slots_1_"+s.name, "slots_3_"+s.name
	samples, err := b.interleave([]starter{
		{one, func() *exec.Cmd { return s.run(b, "run", "--job", "slots-one", "--slots", "1", "--", "true") }},
		{three, func() *exec.Cmd {
			return s.run(b, "run", "--job", "slots-three", "--slots", strconv.Itoa(slotsCompared), "--", "true")
		}},
	})
	if err != nil {
		return err
	}
	n := fmt.Sprintf("median of %d interleaved runs", startupRounds)
	line("run_"+one+"_ms", median(samples[one]), "ms", "leasectl run --slots 1 -- true; "+n)
	line("run_"+three+"_ms", median(samples[three]), "ms", fmt.Sprintf("leasectl run --slots %d -- true; %s", slotsCompared, n))
	line("run_"+three+"_vs_1", median(samples[three])/median(samples[one]), "x", "target <= 1.1")
	return nil
}

// fifoCase is one way fifoFigures hands a job over: to the first of
// waiters waiters, released once the last one waits, and, with
// otherRun, once another run of s (on a job of its own) then started and
// ended: the second waiter's start-up, without a second waiter.
type fifoCase struct {
	waiters  int
	otherRun bool
}

// fifoFigures measures on s the handoff to the first of two FIFO waiters
// against the handoff to a lone waiter, interleaved, and serves
// fifoWaiters waiters on one job. A lone waiter released right after it
// started waiting is the warmest there is: the handoff to one that waited
// while another leasectl started, as the first of two does, is measured
// beside them, for reference.
func (b *bench) fifoFigures(s slotsStore) error {
	cases := []fifoCase{{waiters: 1}, {waiters: 2}, {waiters: 1, otherRun: true}}
	samples := map[fifoCase][]float64{}
	firstServed := 0 // FIFO handoffs that went to the first waiter
	for range handoffRounds {
		for _, i := range b.rng.Perm(len(cases)) {
			c := cases[i]
			d, first, err := b.queuedHandoff(s, c)
			if err != nil {
				return fmt.Errorf("handoff on %s: %w", s.name, err)
			}
			samples[c] = append(samples[c], d)
			if first && c.waiters == 2 {
				firstServed++
			}
		}
	}
	lone, fifo, after := median(samples[cases[0]]), median(samples[cases[1]]), median(samples[cases[2]])
	n := fmt.Sprintf("median of %d, interleaved", handoffRounds)
	line("handoff_fifo_"+s.name+"_ms", fifo, "ms", fmt.Sprintf("to the first of 2 waiters in the queue (served first in %d of %d); target <= handoff_lone_%s_ms, %.2f in the same run; %s",
		firstServed, handoffRounds, s.name, lone, n))
	line("handoff_lone_"+s.name+"_ms", lone, "ms", "to a lone waiter, as before FIFO waiting; "+n)
	line("handoff_lone_after_run_"+s.name+"_ms", after, "ms", "to a lone waiter, released once another `leasectl run` started and ended while it waited; reference; "+n)
	line("handoff_fifo_"+s.name+"_vs_lone", fifo/lone, "x", "target <= 1")
	line("handoff_fifo_"+s.name+"_vs_lone_after_run", fifo/after, "x", "reference: the first of two waiters against a lone one that waited as long")
	inPlace, err := b.arrivalOrder(s)
	if err != nil {
		return fmt.Errorf("%d waiters on %s: %w", fifoWaiters, s.name, err)
	}
	verdict := "no"
	if inPlace == fifoWaiters {
		verdict = "yes"
	}
	fmt.Printf("fifo_order_%s %d of_%d # in order: %s; waiters served in their place of arrival, each queued before the next started; target: all %d\n",
		s.name, inPlace, fifoWaiters, verdict, fifoWaiters)
	return nil
}

// queuedHandoff starts a holder on a fresh job of s and then c's waiters,
// each once the one before waits, (with c.otherRun, runs `true` on
// another job), releases the holder, and returns the time from the
// holder's child's end to the first waiter's child's start, in
// milliseconds, and whether the first waiter started first.
func (b *bench) queuedHandoff(s slotsStore, c fifoCase) (float64, bool, error) {
	var interlude func() error
	if c.otherRun {
		interlude = func() error {
			if out, err := s.run(b, "run", "--job", "fifo-other", "--", "true").CombinedOutput(); err != nil {
				return fmt.Errorf("a run on another job: %v: %s", err, out)
			}
			return nil
		}
	}
	starts, ended, err := b.serveQueue(s, "fifo-"+strconv.Itoa(b.next()), c.waiters, interlude)
	if err != nil {
		return 0, false, err
	}
	return float64(starts[0]-ended) / 1e6, slices.Min(starts) == starts[0], nil
}

// arrivalOrder queues fifoWaiters waiters on one job of s and returns how
// many were served in their place of arrival.
func (b *bench) arrivalOrder(s slotsStore) (int, error) {
	starts, _, err := b.serveQueue(s, "arrival-"+strconv.Itoa(b.next()), fifoWaiters, nil)
	if err != nil {
		return 0, err
	}
	order := make([]int, len(starts))
	for i := range order {
		order[i] = i
	}
	slices.SortStableFunc(order, func(i, j int) int { return cmp.Compare(starts[i], starts[j]) })
	inPlace := 0
	for place, i := range order {
		if place == i {
			inPlace++
		}
	}
	return inPlace, nil
}

// serveQueue starts a holder on job of s and then n waiters (`run --wait`),
// each once the one before logged that it waits, runs interlude (if not
// nil), releases the holder, and waits for every waiter to run its child.
// It returns the waiters' child starts in arrival order and the holder's
// child's end (CLOCK_MONOTONIC ns).
func (b *bench) serveQueue(s slotsStore, job string, n int, interlude func() error) (starts []int64, ended int64, err error) {
	holderFile := b.file("holder")
	holder, err := startProc(s.run(b, "run", "--job", job, "--", b.stamp, "hold", holderFile), true)
	if err != nil {
		return nil, 0, err
	}
	defer holder.cmd.Process.Kill()
	if _, err := holder.childPID(); err != nil {
		return nil, 0, err
	}
	files := make([]string, n)
	waiters := make([]*proc, n)
	for i := range n {
		files[i] = b.file("waiter")
		w, err := startProc(s.run(b, "--log-level", "debug", "run", "--job", job, "--wait", "--", b.stamp, "start", files[i]), false)
		if err != nil {
			return nil, 0, err
		}
		defer w.cmd.Process.Kill()
		if err := w.awaitWaiting(); err != nil {
			return nil, 0, err
		}
		waiters[i] = w
	}
	if interlude != nil {
		if err := interlude(); err != nil {
			return nil, 0, err
		}
	}
	holder.release()
	if err := holder.waitOK(); err != nil {
		return nil, 0, err
	}
	for _, w := range waiters {
		if err := w.waitOK(); err != nil {
			return nil, 0, err
		}
	}
	if ended, err = readStamp(holderFile); err != nil {
		return nil, 0, err
	}
	starts = make([]int64, n)
	for i, f := range files {
		if starts[i], err = readStamp(f); err != nil {
			return nil, 0, err
		}
	}
	return starts, ended, nil
}

//go:build linux

package main

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"
)

// Timing of the fault figures: docs/design.md §8 states failover against the TTL
// and fail-fast against the safety window.
const (
	faultTTL       = time.Second
	faultHeartbeat = 200 * time.Millisecond
	faultSafety    = 500 * time.Millisecond
	// etcdSettle is how long the etcd waiter is given to queue on the lock:
	// etcdctl shows no sign of waiting, so it is time, not an event.
	etcdSettle = 150 * time.Millisecond
)

// handoffCase is one way to hand a lock from a holder to a waiter: the
// holder's child is `stamp hold FILE`, the waiter's `stamp start FILE`.
type handoffCase struct {
	name    string
	holder  func(job, file string) *exec.Cmd
	waiter  func(job, file string) *exec.Cmd
	waiting func(w *proc) error // returns once the waiter waits
}

// handoffs times holder's child end → waiter's child start with --wait on
// both stores, against a blocking flock(1) and etcdctl lock, interleaved.
func (b *bench) handoffs() error {
	stampStart, err := b.stampStartup()
	if err != nil {
		return err
	}
	line("stamp_startup_ms", stampStart, "ms", "exec to first instruction of the stamp helper; included in every handoff below")
	lockFile := filepath.Join(b.tmp, "handoff.flock")
	cases := []handoffCase{
		b.leasectlHandoff("handoff_redis", b.redis.URL),
		b.leasectlHandoff("handoff_embedded", ""),
		{
			name:    "handoff_flock",
			holder:  func(_, file string) *exec.Cmd { return exec.Command("flock", lockFile, b.stamp, "hold", file) },
			waiter:  func(_, file string) *exec.Cmd { return exec.Command("flock", lockFile, b.stamp, "start", file) },
			waiting: func(w *proc) error { return awaitBlockedInFlock(w.cmd.Process.Pid) },
		},
	}
	if b.etcd != nil {
		cases = append(cases, b.etcdctlHandoff("handoff_etcd"))
	}
	samples, err := b.handoffRuns(handoffRounds, cases...)
	if err != nil {
		return err
	}
	n := fmt.Sprintf("median of %d", handoffRounds)
	for _, c := range []struct{ name, comment string }{
		{"handoff_redis", "target <= 1.5x handoff_flock"},
		{"handoff_embedded", "target <= 50"},
		{"handoff_flock", "reference: blocking flock, 2.4"},
		{"handoff_etcd", "reference: etcdctl lock, 5.3"},
	} {
		if s, ok := samples[c.name]; ok {
			m := median(s)
			line(c.name+"_ms", m, "ms", fmt.Sprintf("%s; %s; %.2f ms without the stamp's start-up", c.comment, n, m-stampStart))
		}
	}
	if r, f := samples["handoff_redis"], samples["handoff_flock"]; len(r) > 0 && len(f) > 0 {
		line("handoff_redis_vs_flock", median(r)/median(f), "x", "target <= 1.5; "+floorIs("%.2f ms", median(f))+" (blocking flock's handoff); the stamp's start-up in both")
	}
	return nil
}

// leasectlHandoff hands a job between two `leasectl run`s on the store at
// url ("": the embedded store), the waiter with --wait.
func (b *bench) leasectlHandoff(name, url string) handoffCase {
	return handoffCase{
		name: name,
		holder: func(job, file string) *exec.Cmd {
			return b.leasectlAt(url, "run", "--job", job, "--", b.stamp, "hold", file)
		},
		waiter: func(job, file string) *exec.Cmd {
			return b.leasectlAt(url, "--log-level", "debug", "run", "--job", job, "--wait", "--", b.stamp, "start", file)
		},
		waiting: (*proc).awaitWaiting,
	}
}

// etcdctlHandoff hands a lock between two `etcdctl lock`s on the bench's
// etcd.
func (b *bench) etcdctlHandoff(name string) handoffCase {
	return handoffCase{
		name:    name,
		holder:  func(job, file string) *exec.Cmd { return b.etcdctl("lock", job, "--", b.stamp, "hold", file) },
		waiter:  func(job, file string) *exec.Cmd { return b.etcdctl("lock", job, "--", b.stamp, "start", file) },
		waiting: func(*proc) error { time.Sleep(etcdSettle); return nil },
	}
}

// handoffRuns times rounds handoffs of every case, each round in a new
// random order, and returns each case's times in milliseconds by name.
func (b *bench) handoffRuns(rounds int, cases ...handoffCase) (map[string][]float64, error) {
	samples := map[string][]float64{}
	for range rounds {
		for _, i := range b.rng.Perm(len(cases)) {
			d, err := b.handoff(cases[i])
			if err != nil {
				return nil, fmt.Errorf("%s: %w", cases[i].name, err)
			}
			samples[cases[i].name] = append(samples[cases[i].name], d)
		}
	}
	return samples, nil
}

// stampStartup is the median time from starting the stamp helper to its
// stamp: the helper's own share of every handoff figure.
func (b *bench) stampStartup() (float64, error) {
	var s []float64
	for range handoffRounds {
		file := b.file("stamp")
		start := mono()
		if out, err := exec.Command(b.stamp, "start", file).CombinedOutput(); err != nil {
			return 0, fmt.Errorf("stamp: %v: %s", err, out)
		}
		at, err := readStamp(file)
		if err != nil {
			return 0, err
		}
		s = append(s, float64(at-start)/1e6)
	}
	return median(s), nil
}

// handoff runs one handoff and returns its time in milliseconds.
func (b *bench) handoff(c handoffCase) (float64, error) {
	job := "handoff-" + strconv.Itoa(b.next())
	holderFile, waiterFile := b.file("holder"), b.file("waiter")
	holder, err := startProc(c.holder(job, holderFile), true)
	if err != nil {
		return 0, err
	}
	defer holder.cmd.Process.Kill()
	if _, err := holder.childPID(); err != nil {
		return 0, err
	}
	waiter, err := startProc(c.waiter(job, waiterFile), false)
	if err != nil {
		return 0, err
	}
	defer waiter.cmd.Process.Kill()
	if err := c.waiting(waiter); err != nil {
		return 0, err
	}
	holder.release()
	if err := holder.waitOK(); err != nil {
		return 0, err
	}
	if err := waiter.waitOK(); err != nil {
		return 0, err
	}
	ended, err := readStamp(holderFile)
	if err != nil {
		return 0, err
	}
	started, err := readStamp(waiterFile)
	if err != nil {
		return 0, err
	}
	return float64(started-ended) / 1e6, nil
}

// faultTiming is the run flags of the fault figures.
func faultTiming() []string {
	return []string{"--ttl", faultTTL.String(), "--heartbeat", faultHeartbeat.String(), "--safety", faultSafety.String()}
}

// faultStore is a store the fault figures run against: its URL ("": the
// embedded store), the run flags, and the renewal period the faults are
// placed at random within.
type faultStore struct {
	url       string
	timing    []string
	heartbeat time.Duration
}

// defaultFaults is the store at url with the Redis and embedded stores' fault
// timing.
func defaultFaults(url string) faultStore {
	return faultStore{url: url, timing: faultTiming(), heartbeat: faultHeartbeat}
}

// failover times SIGKILL of the holder's supervisor → the waiter's child
// starts, on both stores.
func (b *bench) failover() error {
	for _, store := range []struct {
		name string
		url  string
	}{{"redis", b.redis.URL}, {"embedded", ""}} {
		s, err := b.repeat(faultRounds, func() (float64, error) { return b.failoverOnce(defaultFaults(store.url), faultTTL) })
		if err != nil {
			return fmt.Errorf("failover on %s: %w", store.name, err)
		}
		line("failover_"+store.name+"_ms", median(s), "ms", fmt.Sprintf("target <= ttl + 100 = %.0f; ttl %s; median of %d, max %.1f",
			ms(faultTTL+100*time.Millisecond), faultTTL, faultRounds, maxOf(s)))
	}
	return nil
}

// repeat runs once n times and returns its figures.
func (b *bench) repeat(n int, once func() (float64, error)) ([]float64, error) {
	var s []float64
	for range n {
		d, err := once()
		if err != nil {
			return nil, err
		}
		s = append(s, d)
	}
	return s, nil
}

// failoverOnce starts a holder and a waiter on one job of st, SIGKILLs the
// holder's supervisor at a random point within killWithin (a TTL, right
// after a renewal being the worst case, or on etcd a heartbeat), and returns the time
// from the kill to the waiter's child's start.
func (b *bench) failoverOnce(st faultStore, killWithin time.Duration) (float64, error) {
	job := "failover-" + strconv.Itoa(b.next())
	holder, err := startProc(b.leasectlAt(st.url, append(append([]string{"run", "--job", job}, st.timing...), "--", b.stamp, "hold", b.file("holder"))...), true)
	if err != nil {
		return 0, err
	}
	defer holder.wait()
	defer holder.release()
	if _, err := holder.childPID(); err != nil {
		holder.cmd.Process.Kill()
		return 0, err
	}
	waiterFile := b.file("waiter")
	waiter, err := startProc(b.leasectlAt(st.url, append(append([]string{"--log-level", "debug", "run", "--job", job, "--wait"}, st.timing...), "--", b.stamp, "start", waiterFile)...), false)
	if err != nil {
		holder.cmd.Process.Kill()
		return 0, err
	}
	if err := waiter.awaitWaiting(); err != nil {
		holder.cmd.Process.Kill()
		waiter.cmd.Process.Kill()
		return 0, err
	}
	time.Sleep(time.Duration(b.rng.Int64N(int64(killWithin))))
	killed := mono()
	if err := holder.cmd.Process.Kill(); err != nil {
		return 0, fmt.Errorf("killing the holder: %w", err)
	}
	if err := waiter.waitOK(); err != nil {
		return 0, err
	}
	started, err := readStamp(waiterFile)
	if err != nil {
		return 0, err
	}
	return float64(started-killed) / 1e6, nil
}

// failFast times a Redis freeze → the holder's child dies.
func (b *bench) failFast() error {
	s, err := b.repeat(faultRounds, func() (float64, error) {
		return b.failFastOnce(defaultFaults(b.redis.URL), b.redis.Freeze, b.redis.Thaw)
	})
	if err != nil {
		return fmt.Errorf("fail-fast: %w", err)
	}
	line("failfast_redis_ms", median(s), "ms", fmt.Sprintf(
		"child death - Redis freeze (SIGSTOP); bound: death <= last confirmed renewal's send + safety + 50 = send + %.0f, and that send precedes the freeze; safety %s, heartbeat %s; median of %d, max %.1f",
		ms(faultSafety+50*time.Millisecond), faultSafety, faultHeartbeat, faultRounds, maxOf(s)))
	return nil
}

// failFastOnce starts a holder on st, lets its renewals be confirmed, then
// freezes the store at a random point of the heartbeat cycle and returns
// the time from the freeze to the child's death.
func (b *bench) failFastOnce(st faultStore, freeze, thaw func() error) (float64, error) {
	job := "failfast-" + strconv.Itoa(b.next())
	holder, err := startProc(b.leasectlAt(st.url, append(append([]string{"run", "--job", job}, st.timing...), "--", b.stamp, "hold", b.file("holder"))...), true)
	if err != nil {
		return 0, err
	}
	defer holder.wait()
	defer holder.release()
	child, err := holder.childPID()
	if err != nil {
		holder.cmd.Process.Kill()
		return 0, err
	}
	pidfd, err := openPidfd(child)
	if err != nil {
		holder.cmd.Process.Kill()
		return 0, err
	}
	defer pidfd.Close()
	time.Sleep(3*st.heartbeat + time.Duration(b.rng.Int64N(int64(st.heartbeat))))
	frozen := mono()
	if err := freeze(); err != nil {
		return 0, err
	}
	died, err := pidfd.awaitDeath()
	if terr := thaw(); err == nil {
		err = terr
	}
	if err != nil {
		holder.cmd.Process.Kill()
		return 0, err
	}
	return float64(died-frozen) / 1e6, nil
}

// maxOf is the largest of xs.
func maxOf(xs []float64) float64 {
	m := 0.0
	for _, x := range xs {
		m = max(m, x)
	}
	return m
}

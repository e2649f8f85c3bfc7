//go:build linux

package main

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
)

// budgetRounds is how many traced runs each store's budget is the median of.
const budgetRounds = 20

// budgetSyscalls are the system calls perf trace records: few, so that
// tracing adds little, and enough to mark every phase of a run (see phases).
const budgetSyscalls = "execve,exit_group,openat,pipe2,connect,flock,write,kill"

// phase is one line of the time budget of `run -- true`: the time from the
// event named by from to the one named by to.
type phase struct {
	name, from, to, what string
}

// phases are the budget's lines, in the order a run passes them. The events
// are read off perf trace's output by marks.
var phases = []phase{
	{"runtime", "start", "pipe", "runtime start, package init, main and cobra, up to the watchdog's start"},
	{"store_open", "pipe", "store", "opening the store, up to its first system call (embedded: the job file's flock; Redis: connect)"},
	{"acquire_exec", "store", "child_exec", "acquire (Redis: HELLO and one EVALSHA), the watchdog's deadline and token, fork and exec of the child"},
	{"child", "child_exec", "child_exit", "the child, true(1): a dynamically linked exec"},
	{"reap_kill", "child_exit", "kill", "reaping the child, then SIGKILL to its process group"},
	{"watchdog_reap", "kill", "release", "reaping the SIGKILLed watchdog, orphan check, up to the release's first system call"},
	{"release_exit", "release", "exit", "release (embedded: flock and write; Redis: one EVALSHA) and exit"},
}

// budget traces `leasectl run --job J -- true` with perf trace on both
// stores and prints the median of every phase, and the watchdog's own
// start-up, which overlaps the supervisor's. perf trace adds its own cost to
// every recorded system call: the phases' total is printed beside the
// untraced run's median from startup for that reason.
func (b *bench) budget() error {
	if err := exec.Command("perf", "trace", "-e", "exit_group", "--", "true").Run(); err != nil {
		fmt.Println("# budget skipped: perf trace is not available here (Debian: linux-perf)")
		return nil
	}
	for _, store := range []struct {
		name  string
		redis bool
	}{{"embedded", false}, {"redis", true}} {
		samples := map[string][]float64{}
		for range budgetRounds {
			m, err := b.traceRun(store.redis)
			if err != nil {
				return fmt.Errorf("budget, %s: %w", store.name, err)
			}
			for _, p := range phases {
				samples[p.name] = append(samples[p.name], m[p.to]-m[p.from])
			}
			if ready, ok := m["watchdog_ready"]; ok && ready < m["kill"] {
				samples["watchdog_ready"] = append(samples["watchdog_ready"], ready-m["watchdog_exec"])
			}
			samples["total"] = append(samples["total"], m["exit"]-m["start"])
		}
		n := fmt.Sprintf("median of %d runs under perf trace -e %s", budgetRounds, budgetSyscalls)
		for _, p := range phases {
			line("budget_"+store.name+"_"+p.name+"_ms", median(samples[p.name]), "ms", p.what)
		}
		line("budget_"+store.name+"_total_ms", median(samples["total"]), "ms", n)
		ready := samples["watchdog_ready"]
		line("budget_"+store.name+"_watchdog_ready_ms", median(ready), "ms", fmt.Sprintf(
			"the watchdog: exec to its ready line, in the %d of %d runs where it got that far before the run ended; "+
				"the child never waits for it (the group it leads is guarded from its first instruction)", len(ready), budgetRounds))
	}
	return nil
}

// traceRun runs `leasectl run -- true` once under perf trace and returns the
// time of each mark in milliseconds since perf began the trace.
func (b *bench) traceRun(redis bool) (map[string]float64, error) {
	out := b.file("perf-trace")
	run := b.leasectlCmd(redis, "run", "--job", fmt.Sprintf("budget-%d", b.next()), "--", "true")
	cmd := exec.Command("perf", append([]string{"trace", "-o", out, "-e", budgetSyscalls, "--"}, run.Args...)...)
	cmd.Env = run.Env
	if o, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("perf trace: %v: %s", err, o)
	}
	text, err := os.ReadFile(out)
	if err != nil {
		return nil, err
	}
	return marks(text, redis)
}

// event is one line of perf trace's output.
type event struct {
	at      float64 // ms since the trace began, at the call's entry; -1: none printed
	resumed bool    // the "[continued]" half of a call that overlapped others
	comm    string  // the thread's command name when the line was printed
	tid     int
	syscall string
	args    string // the call's arguments and result, as printed
}

// parseTrace reads perf trace's lines: "  4.134 ( 0.144 ms): comm/tid
// call(args) = ret", or "? ( ): comm/tid  ... [continued]: call()) = ret"
// for the end of a call whose entry was printed earlier, or not at all
// (the traced command's own execve).
func parseTrace(text []byte) []event {
	var evs []event
	sc := bufio.NewScanner(bytes.NewReader(text))
	for sc.Scan() {
		at, rest, ok := strings.Cut(strings.TrimSpace(sc.Text()), " ")
		if !ok {
			continue
		}
		e := event{at: -1}
		if t, err := strconv.ParseFloat(at, 64); err == nil {
			e.at = t
		}
		_, rest, ok = strings.Cut(rest, "): ")
		if !ok {
			continue
		}
		who, call, ok := strings.Cut(rest, " ")
		i := strings.LastIndexByte(who, '/')
		if !ok || i < 0 {
			continue
		}
		call = strings.TrimSpace(call)
		if c, found := strings.CutPrefix(call, "... [continued]: "); found {
			e.resumed, call = true, c
		}
		var err error
		e.comm = who[:i]
		if e.tid, err = strconv.Atoi(who[i+1:]); err != nil {
			continue
		}
		if e.syscall, e.args, ok = strings.Cut(call, "("); ok {
			evs = append(evs, e)
		}
	}
	// perf trace prints each thread's calls in order, but not the threads'
	// in one order: a call may come out after a later one of another thread.
	slices.SortStableFunc(evs, func(a, b event) int { return cmp.Compare(a.at, b.at) })
	return evs
}

// marks finds the budget's events in one trace of `leasectl run -- true`:
//
//	start          the supervisor's first openat (the runtime's, right after exec)
//	pipe           the first pipe2: the watchdog's start begins
//	store          the first flock (embedded) or connect (Redis)
//	watchdog_exec  the first execve timed (leasectl's own is not), the watchdog's
//	watchdog_ready the first 2-byte write after it: "R\n" (optional: the
//	               run may end before the watchdog gets that far)
//	child_exec     the next execve, true's
//	child_exit     the exit_group of true's thread
//	kill           the first kill after it: the group's SIGKILL
//	release        the first flock (embedded) or write (Redis) after kill
//	exit           the last exit_group: the supervisor's
func marks(text []byte, redis bool) (map[string]float64, error) {
	m := map[string]float64{}
	set := func(k string, at float64) {
		if _, ok := m[k]; !ok {
			m[k] = at
		}
	}
	storeCall, releaseCall := "flock", "flock"
	if redis {
		storeCall, releaseCall = "connect", "write"
	}
	// perf names threads lazily, sometimes by their name before exec: the
	// child is told apart by order instead. The watchdog is always exec'd
	// first (the child joins the group it leads), the child second; the
	// child's exit is its thread's exit_group.
	execs, childTid := 0, -1
	for _, e := range parseTrace(text) {
		if e.resumed || e.at < 0 {
			continue
		}
		_, killed := m["kill"]
		switch {
		case e.syscall == "openat":
			set("start", e.at)
		case e.syscall == "pipe2":
			set("pipe", e.at)
		case e.syscall == storeCall && !killed:
			set("store", e.at)
		case e.syscall == "execve" && execs == 0:
			execs++
			set("watchdog_exec", e.at)
		case e.syscall == "execve" && execs == 1:
			execs++
			childTid = e.tid
			set("child_exec", e.at)
		case e.syscall == "write" && strings.Contains(e.args, "count: 2)") && execs > 0:
			set("watchdog_ready", e.at)
		case e.syscall == "exit_group" && e.tid == childTid:
			set("child_exit", e.at)
		case e.syscall == "kill" && m["child_exit"] > 0:
			set("kill", e.at)
		case e.syscall == releaseCall && killed:
			set("release", e.at)
		case e.syscall == "exit_group":
			m["exit"] = e.at
		}
	}
	for _, k := range []string{"start", "pipe", "store", "watchdog_exec", "child_exec", "child_exit", "kill", "release", "exit"} {
		if _, ok := m[k]; !ok {
			return nil, errors.New("no " + k + " event in the trace: " + strings.Join(strings.SplitN(string(text), "\n", 60), "\n"))
		}
	}
	return m, nil
}

//go:build linux

// Command bench measures every figure of docs/design.md §8 in one run, side by side
// with flock(1) and `etcdctl lock`, and prints them as `name value unit`
// lines, each with its target as a comment. `make bench` runs it from the
// module root. It starts its own redis-server (and etcd, when installed) on
// free loopback ports and stops them at the end; it never touches another
// server.
//
// The machine may be busy with other work: every comparison is measured
// interleaved, round-robin, so that noise hits all commands alike, and
// reported as a median.
package main

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Sample counts: at least 30 for every median docs/design.md §8 compares.
const (
	startupRounds = 40 // interleaved runs of each start-up command
	warmupRounds  = 3  // not counted: page cache, first connections
	handoffRounds = 30 // handoffs per store and reference
	faultRounds   = 5  // failovers and fail-fasts: each waits out a TTL
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintf(os.Stderr, "bench: %v\n", err)
		os.Exit(1)
	}
}

// step is one group of figures, named for -only.
type step struct {
	name  string
	run   func(*bench) error
	quick bool // in the default run: what a run costs, in seconds; the rest needs -full
}

// steps are every group of figures, in the order they are printed. The
// quick ones print every target of what a run costs and what a fleet costs
// the registry (issue 26), in about three minutes together, two of them the
// registry's; the others start Sentinel deployments, Redis Clusters, a
// PostgreSQL, and seed 100,000 runs on etcd, and take minutes each.
var steps = []step{
	{"startup", (*bench).startup, true}, {"budget", (*bench).budget, true}, {"handoffs", (*bench).handoffs, true},
	{"failover", (*bench).failover, true}, {"failfast", (*bench).failFast, true}, {"rss", (*bench).rss, true},
	{"store", (*bench).storeFigures, false}, {"fence", (*bench).fenceFigures, true}, {"etcdrun", (*bench).etcdRun, true},
	{"topologies", (*bench).topologies, false}, {"etcd", (*bench).etcdFigures, false}, {"hedging", (*bench).etcdHedging, false},
	{"postgres", (*bench).postgres, false}, {"registry", (*bench).registryFigures, true}, {"overdue", (*bench).overdueFigures, false},
	{"notify", (*bench).notifyFigures, true},
	{"slots", (*bench).slotsFigures, true}, {"slots-stores", (*bench).slotsStoreFigures, false},
}

func run() error {
	began := time.Now()
	var names, quick []string
	for _, s := range steps {
		names = append(names, s.name)
		if s.quick {
			quick = append(quick, s.name)
		}
	}
	only := flag.String("only", "", "run only these groups of figures, comma-separated: "+strings.Join(names, ", "))
	full := flag.Bool("full", false, "run every group; without it (and without -only), only the quick ones: "+strings.Join(quick, ", "))
	flag.Parse()
	var chosen []step
	for _, s := range steps {
		if s.quick || *full {
			chosen = append(chosen, s)
		}
	}
	if *only != "" {
		chosen = nil
		for _, name := range strings.Split(*only, ",") {
			i := slices.IndexFunc(steps, func(s step) bool { return s.name == name })
			if i < 0 {
				return fmt.Errorf("-only %s: no such group; the groups: %s", name, strings.Join(names, ", "))
			}
			chosen = append(chosen, steps[i])
		}
	}
	if _, err := os.Stat("go.mod"); err != nil {
		return fmt.Errorf("run from the module root (make bench): %w", err)
	}
	tmp, err := os.MkdirTemp("", "leasectl-bench-")
	if err != nil {
		return fmt.Errorf("temp dir: %w", err)
	}
	defer os.RemoveAll(tmp)
	b := &bench{tmp: tmp, rng: rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))}
	if err := b.build(); err != nil {
		return err
	}
	fmt.Printf("# leasectl bench: static build (CGO_ENABLED=0 -trimpath -s -w), medians; load average %s\n", loadAverage())
	if err := b.startServers(); err != nil {
		return err
	}
	defer b.stopServers()
	for _, s := range chosen {
		start := time.Now()
		if err := s.run(b); err != nil {
			return err
		}
		fmt.Printf("# %s took %s\n", s.name, time.Since(start).Round(100*time.Millisecond))
	}
	fmt.Printf("# done in %s\n", time.Since(began).Round(100*time.Millisecond))
	return nil
}

// bench holds the built binaries and the servers of one run.
type bench struct {
	tmp      string
	leasectl string
	stamp    string
	setnx    string
	emptyGo  string
	initOnly string
	tlsFloor string
	rng      *rand.Rand
	servers
	seq int // numbers files and job IDs
}

// emptyGoSource is the floor of every Go start-up: a static binary that
// links only the runtime. Built as a module of its own, so that nothing of
// leasectl's go.mod comes in.
const emptyGoSource = "package main\n\nfunc main() {}\n"

// build compiles leasectl as the release does, with its small watchdog
// beside it, the helpers (the registry's floor among them), and the empty Go
// program, all the same way.
func (b *bench) build() error {
	b.leasectl = filepath.Join(b.tmp, "leasectl")
	b.stamp = filepath.Join(b.tmp, "stamp")
	b.setnx = filepath.Join(b.tmp, "setnx")
	b.emptyGo = filepath.Join(b.tmp, "empty-go")
	b.initOnly = filepath.Join(b.tmp, "init-only")
	b.tlsFloor = filepath.Join(b.tmp, "tlsfloor")
	emptyDir := filepath.Join(b.tmp, "empty-go-src")
	if err := os.Mkdir(emptyDir, 0o755); err != nil {
		return err
	}
	for name, text := range map[string]string{"go.mod": "module emptygo\n", "main.go": emptyGoSource} {
		if err := os.WriteFile(filepath.Join(emptyDir, name), []byte(text), 0o644); err != nil {
			return err
		}
	}
	for _, t := range []struct{ out, dir, pkg string }{
		{b.leasectl, "", "."}, {filepath.Join(b.tmp, "leasectl-watchdog"), "", "./cmd/leasectl-watchdog"}, {b.stamp, "", "./bench/stamp"}, {b.setnx, "", "./bench/setnx"}, {b.initOnly, "", "./bench/initonly"},
		{b.tlsFloor, "", "./bench/tlsfloor"}, {b.emptyGo, emptyDir, "."},
	} {
		cmd := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", t.out, t.pkg)
		cmd.Dir = t.dir
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s: %v\n%s", filepath.Join(t.dir, t.pkg), err, out)
		}
	}
	return nil
}

// loadAverage is the 1, 5 and 15-minute load average: the machine may be
// busy with other work, which the figures should be read against.
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "unknown"
}

// next returns a fresh number for file names and job IDs.
func (b *bench) next() int {
	b.seq++
	return b.seq
}

// file returns a fresh path in the temp dir.
func (b *bench) file(prefix string) string {
	return filepath.Join(b.tmp, fmt.Sprintf("%s-%d", prefix, b.next()))
}

// floorIs names a floor in a target's comment: format is the floor's
// value's.
func floorIs(format string, v float64) string {
	return fmt.Sprintf("floor "+format+" in this run", v)
}

// line prints one figure: name, value, unit, then a comment.
func line(name string, value float64, unit, comment string) {
	prec := 2
	if unit == "bytes" {
		prec = 0
	}
	fmt.Printf("%s %.*f %s", name, prec, value, unit)
	if comment != "" {
		fmt.Printf(" # %s", comment)
	}
	fmt.Println()
}

// median of xs (not modified).
func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Sorted(slices.Values(xs))
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// ms converts a duration to milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

//go:build linux

package main

import (
	"fmt"
	"maps"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// rssSettle lets the supervisor run a few heartbeats before its peak RSS is
// read, so that renewals count too.
const rssSettle = 500 * time.Millisecond

// rss reads the peak resident set (VmHWM) of the supervisor and of its
// watchdog while a child runs, on both stores, and their anonymous memory
// (RssAnon): the rest of their resident set is the binaries' pages, which
// the page cache shares between every run on the host. Beside them, the
// floors of the same run (rssFloors).
func (b *bench) rss() error {
	floors, err := b.rssFloors()
	if err != nil {
		return err
	}
	// A run is two processes: the supervisor, which links every package
	// leasectl links, and the watchdog, a small Go program. Neither can
	// hold less than init_only and empty_go, which do nothing but start.
	floorOf := func(names ...string) string {
		if floors == nil {
			return ""
		}
		sum := 0.0
		for _, name := range names {
			sum += floors[name]
		}
		return "; " + floorIs("%.2f MB", sum) + " (" + strings.Join(names, " + ") + ")"
	}
	if floors != nil {
		line("flock_rss_mb", floors["flock"], "MB", "reference: peak RSS of flock -n FILE true, as GNU time reports it (each floor below the same way)")
		line("setnx_rss_mb", floors["setnx"], "MB", "reference: the bare Go + go-redis SET NX, true, DEL floor")
		line("empty_go_rss_mb", floors["empty_go"], "MB", "floor of the watchdog: an empty static Go binary")
		line("init_only_rss_mb", floors["init_only"], "MB", "floor of the supervisor: every package leasectl links, main() {}; the binary's pages its start touches")
	}
	for _, store := range []struct {
		name  string
		redis bool
	}{{"redis", true}, {"embedded", false}} {
		m, err := b.rssOnce(store.redis)
		if err != nil {
			return fmt.Errorf("rss on %s: %w", store.name, err)
		}
		line("supervisor_rss_"+store.name+"_mb", m.sup, "MB", "VmHWM of leasectl run while its child runs")
		line("watchdog_rss_"+store.name+"_mb", m.wd, "MB", "target <= 2; VmHWM of its watchdog process, leasectl-watchdog"+floorOf("empty_go"))
		line("supervision_rss_"+store.name+"_mb", m.sup+m.wd, "MB", "target <= 10; supervisor + watchdog, what a run costs the host beside its child"+floorOf("init_only", "empty_go"))
		line("supervision_anon_"+store.name+"_mb", m.supAnon+m.wdAnon, "MB", "reference: their RssAnon, what each further run at once adds (the binaries' pages are shared)")
	}
	return nil
}

// gnuTime is the GNU time program, which reads the floors' peak memory.
const gnuTime = "/usr/bin/time"

// rssFloors runs each floor command startupRounds times, interleaved, and
// returns the median of each one's peak resident set in MB; nil, and a
// line that says so, where GNU time is not installed.
func (b *bench) rssFloors() (map[string]float64, error) {
	if _, err := os.Stat(gnuTime); err != nil {
		fmt.Printf("# the memory floors are skipped: GNU time (%s) is not installed (make bench installs it)\n", gnuTime)
		return nil, nil
	}
	argvs := b.floorArgvs()
	names := slices.Sorted(maps.Keys(argvs))
	peaks := map[string][]float64{}
	err := b.rounds(len(names), func(i int, keep bool) error {
		mb, err := b.peakRSS(argvs[names[i]])
		if err != nil {
			return fmt.Errorf("%s: %w", names[i], err)
		}
		if keep {
			peaks[names[i]] = append(peaks[names[i]], mb)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	floors := map[string]float64{}
	for name, xs := range peaks {
		floors[name] = median(xs)
	}
	return floors, nil
}

// peakRSS runs argv to its end under GNU time and returns its peak resident
// set in MB (%M, the kernel's ru_maxrss). A child bench started itself
// would report bench's own peak: Go starts a command with vfork, and the
// kernel counts the memory the child shared with bench until its exec.
func (b *bench) peakRSS(argv []string) (float64, error) {
	out := b.file("peak-rss")
	cmd := exec.Command(gnuTime, append([]string{"-f", "%M", "-o", out}, argv...)...)
	if combined, err := cmd.CombinedOutput(); err != nil {
		return 0, fmt.Errorf("%v: %s", err, combined)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		return 0, err
	}
	kb, err := strconv.ParseFloat(strings.TrimSpace(string(raw)), 64)
	if err != nil {
		return 0, fmt.Errorf("GNU time's %%M: %w", err)
	}
	return kb / 1024, nil
}

// runMemory is what a run's two processes hold, in MB.
type runMemory struct {
	sup, wd, supAnon, wdAnon float64
}

func (b *bench) rssOnce(redis bool) (runMemory, error) {
	job := "rss-" + strconv.Itoa(b.next())
	p, err := startProc(b.leasectlCmd(redis, "run", "--job", job, "--heartbeat", "100ms", "--ttl", "1s", "--", b.stamp, "hold", b.file("rss")), true)
	if err != nil {
		return runMemory{}, err
	}
	var m runMemory
	child, err := p.childPID()
	if err == nil {
		time.Sleep(rssSettle)
		m, err = memoryOf(p.cmd.Process.Pid, child)
	}
	p.release()
	if werr := p.waitOK(); err == nil {
		err = werr
	}
	return m, err
}

// memoryOf reads the memory of supervisor pid and of its watchdog, the
// child of pid that runs leasectl-watchdog and is not child.
func memoryOf(pid, child int) (runMemory, error) {
	var m runMemory
	kids := childrenOf(pid)
	wd := slices.IndexFunc(kids, func(k int) bool { return k != child && isWatchdog(k) })
	if wd < 0 {
		return m, fmt.Errorf("no watchdog among the children of %d", pid)
	}
	wdPID := kids[wd]
	var err error
	for _, r := range []struct {
		pid   int
		field string
		into  *float64
	}{{pid, "VmHWM", &m.sup}, {pid, "RssAnon", &m.supAnon}, {wdPID, "VmHWM", &m.wd}, {wdPID, "RssAnon", &m.wdAnon}} {
		if *r.into, err = statusMB(r.pid, r.field); err != nil {
			return m, err
		}
	}
	return m, nil
}

// isWatchdog reports whether pid runs the small watchdog program built
// beside leasectl.
func isWatchdog(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && strings.HasSuffix(exe, "/leasectl-watchdog")
}

//go:build linux

package main

import (
	"fmt"
	"os"
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
// the page cache shares between every run on the host.
func (b *bench) rss() error {
	for _, store := range []struct {
		name  string
		redis bool
	}{{"redis", true}, {"embedded", false}} {
		m, err := b.rssOnce(store.redis)
		if err != nil {
			return fmt.Errorf("rss on %s: %w", store.name, err)
		}
		line("supervisor_rss_"+store.name+"_mb", m.sup, "MB", "VmHWM of leasectl run while its child runs")
		line("watchdog_rss_"+store.name+"_mb", m.wd, "MB", "target <= 2; VmHWM of its watchdog process, leasectl-watchdog")
		line("supervision_rss_"+store.name+"_mb", m.sup+m.wd, "MB", "target <= 10; supervisor + watchdog, what a run costs the host beside its child")
		line("supervision_anon_"+store.name+"_mb", m.supAnon+m.wdAnon, "MB", "reference: their RssAnon, what each further run at once adds (the binaries' pages are shared)")
	}
	return nil
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

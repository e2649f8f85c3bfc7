//go:build linux

package main

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"
)

// rssSettle lets the supervisor run a few heartbeats before its peak RSS is
// read, so that renewals count too.
const rssSettle = 500 * time.Millisecond

// rss reads the peak resident set (VmHWM) of the supervisor and of its
// watchdog while a child runs, on both stores.
func (b *bench) rss() error {
	for _, store := range []struct {
		name  string
		redis bool
	}{{"redis", true}, {"embedded", false}} {
		sup, wd, err := b.rssOnce(store.redis)
		if err != nil {
			return fmt.Errorf("rss on %s: %w", store.name, err)
		}
		line("supervisor_rss_"+store.name+"_mb", sup, "MB", "VmHWM of leasectl run while its child runs")
		line("watchdog_rss_"+store.name+"_mb", wd, "MB", "target <= 2; VmHWM of its watchdog process, leasectl-watchdog")
		line("supervision_rss_"+store.name+"_mb", sup+wd, "MB", "target <= 10; supervisor + watchdog, what a run costs the host beside its child")
	}
	return nil
}

func (b *bench) rssOnce(redis bool) (sup, wd float64, err error) {
	job := "rss-" + strconv.Itoa(b.next())
	p, err := startProc(b.leasectlCmd(redis, "run", "--job", job, "--heartbeat", "100ms", "--ttl", "1s", "--", b.stamp, "hold", b.file("rss")), true)
	if err != nil {
		return 0, 0, err
	}
	child, err := p.childPID()
	if err == nil {
		time.Sleep(rssSettle)
		sup, wd, err = peakRSS(p.cmd.Process.Pid, child)
	}
	p.release()
	if werr := p.waitOK(); err == nil {
		err = werr
	}
	return sup, wd, err
}

// peakRSS reads the VmHWM of supervisor pid and of its watchdog, the child
// of pid that runs leasectl and is not child.
func peakRSS(pid, child int) (sup, wd float64, err error) {
	if sup, err = vmHWM(pid); err != nil {
		return 0, 0, err
	}
	for _, k := range childrenOf(pid) {
		if k != child && isWatchdog(k) {
			wd, err = vmHWM(k)
			return sup, wd, err
		}
	}
	return 0, 0, fmt.Errorf("no watchdog among the children of %d", pid)
}

// isWatchdog reports whether pid runs the small watchdog program built
// beside leasectl.
func isWatchdog(pid int) bool {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	return err == nil && strings.HasSuffix(exe, "/leasectl-watchdog")
}

package filestore

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// procHost is what PIDs are relative to: the kernel's boot, and the PID
// namespace in it.
type procHost struct {
	boot  string // /proc/sys/kernel/random/boot_id
	pidNS string // the target of /proc/self/ns/pid
}

// currentHost is the boot and PID namespace of this process. It fails
// when /proc is another PID namespace's than this process's, whose PIDs
// would name other processes.
func currentHost() (procHost, error) {
	boot, err := os.ReadFile("/proc/sys/kernel/random/boot_id")
	if err != nil {
		return procHost{}, err
	}
	ns, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return procHost{}, err
	}
	if self, err := os.Readlink("/proc/self"); err != nil || self != strconv.Itoa(os.Getpid()) {
		return procHost{}, fmt.Errorf("/proc is not of this process's PID namespace")
	}
	return procHost{boot: strings.TrimSpace(string(boot)), pidNS: ns}, nil
}

// process is what /proc/PID/stat tells of a process.
type process struct {
	host    procHost
	state   byte   // R, S, D, Z, ...
	pgrp    int    // its process group
	threads int    // its threads, the leader's included
	start   uint64 // clock ticks after boot: with the PID, who it is
}

// dead reports whether p runs nothing any more: a zombie whose every
// thread exited (a leader that exited alone shows as a zombie too, while
// its other threads run on).
func (p process) dead() bool { return p.state == 'Z' && p.threads <= 1 }

// selfProcess is this process.
func selfProcess() (process, error) {
	host, err := currentHost()
	if err != nil {
		return process{}, err
	}
	p, err := readProcess("self")
	p.host = host
	return p, err
}

// readProcess reads /proc/<pid>/stat.
func readProcess(pid string) (process, error) {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return process{}, err
	}
	// The command name, in parentheses, may hold anything: the fields
	// that follow its last ')' are state (3), ppid, pgrp (5), ...,
	// num_threads (20), itrealvalue, starttime (22).
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return process{}, fmt.Errorf("/proc/%s/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 || len(f[0]) != 1 {
		return process{}, fmt.Errorf("/proc/%s/stat: too few fields", pid)
	}
	pgrp, err := strconv.Atoi(f[2])
	if err != nil {
		return process{}, fmt.Errorf("/proc/%s/stat: process group: %w", pid, err)
	}
	threads, err := strconv.Atoi(f[17])
	if err != nil {
		return process{}, fmt.Errorf("/proc/%s/stat: threads: %w", pid, err)
	}
	start, err := strconv.ParseUint(f[19], 10, 64)
	if err != nil {
		return process{}, fmt.Errorf("/proc/%s/stat: start time: %w", pid, err)
	}
	return process{state: f[0][0], pgrp: pgrp, threads: threads, start: start}, nil
}

// gone reports whether the run n notes can no longer run a single
// instruction on this host: its supervisor is gone, and then its child's
// process group is empty, or holds only zombies. With a wait, it waits
// that long at most for a group whose supervisor is gone to die, through
// the members' pidfds: an event, not polling. Anything it cannot prove
// answers false: another boot or PID namespace, a /proc it may not read or
// that hides processes. docs/semantics.md (Acquire) gives the argument.
func gone(n groupNote, wait time.Duration) bool {
	here, err := currentHost()
	if err != nil || here != n.host || !processGone(n.pid, n.start) {
		return false
	}
	// The supervisor is gone, so no process joins the group any more
	// but by forking from a member: a child it forked joins before exec,
	// while the watchdog, who leads the group, cannot have died of its
	// closed pipe yet.
	deadline := time.Now().Add(wait)
	for {
		if groupGone(n.pgid) {
			return true
		}
		left := time.Until(deadline)
		member := liveMember(n.pgid)
		if left <= 0 || member == 0 || !awaitExit(member, left) {
			return false
		}
	}
}

// groupGone reports whether process group pgid is empty, or holds only
// zombies.
func groupGone(pgid int) bool {
	return errors.Is(unix.Kill(-pgid, 0), unix.ESRCH) || onlyZombies(pgid)
}

// liveMember is a process of group pgid that is not dead, its leader if it
// is one, or 0 if none can be found.
func liveMember(pgid int) int {
	if p, err := readProcess(strconv.Itoa(pgid)); err == nil && p.pgrp == pgid && !p.dead() {
		return pgid
	}
	names, err := procNames()
	if err != nil {
		return 0
	}
	for _, name := range names {
		if p, err := readProcess(name); err == nil && p.pgrp == pgid && !p.dead() {
			pid, _ := strconv.Atoi(name)
			return pid
		}
	}
	return 0
}

// awaitExit waits, no longer than d, for process pid to exit, and reports
// whether it did (or was gone already).
func awaitExit(pid int, d time.Duration) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return true
	}
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	deadline := time.Now().Add(d)
	for {
		left := time.Until(deadline)
		if left <= 0 {
			return false
		}
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, int((left+time.Millisecond-1)/time.Millisecond))
		switch {
		case errors.Is(err, unix.EINTR):
		case err != nil:
			return false
		default:
			return n > 0
		}
	}
}

// processGone reports whether the process that had pid and start time
// start is gone: no process has pid, or another process does, or it is a
// zombie, which runs nothing any more.
func processGone(pid int, start uint64) bool {
	if errors.Is(unix.Kill(pid, 0), unix.ESRCH) {
		return true
	}
	p, err := readProcess(strconv.Itoa(pid))
	if err != nil {
		return false // gone since, or hidden: not proven
	}
	return p.start != start || p.dead()
}

// onlyZombies reports whether every process of group pgid is a zombie: its
// members killed, waiting for their new parent (init) to reap them. Two
// listings of /proc must agree: a member that forked during the first
// before it died shows in the second, as its child does, which a zombie
// can no longer make. A /proc that hides other users' processes
// (hidepid) proves nothing.
func onlyZombies(pgid int) bool {
	if procHidesProcesses() {
		return false
	}
	first, ok := zombieGroup(pgid)
	if !ok {
		return false
	}
	second, ok := zombieGroup(pgid)
	return ok && maps.Equal(first, second)
}

// zombieGroup lists the members of group pgid, by PID with their start
// time, if all of them are zombies.
func zombieGroup(pgid int) (map[int]uint64, bool) {
	names, err := procNames()
	if err != nil {
		return nil, false
	}
	members := map[int]uint64{}
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil {
			continue
		}
		p, err := readProcess(name)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue // reaped since the listing
		case err != nil:
			return nil, false
		case p.pgrp != pgid:
			continue
		case !p.dead():
			return nil, false
		}
		members[pid] = p.start
	}
	return members, true
}

// procNames lists /proc: the PIDs of every process, and other names.
func procNames() ([]string, error) {
	d, err := os.Open("/proc")
	if err != nil {
		return nil, err
	}
	defer d.Close()
	return d.Readdirnames(-1)
}

// procHidesProcesses reports whether /proc may hide processes from this
// one (mounted with hidepid), or cannot be told.
func procHidesProcesses() bool {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return true
	}
	hides := true // until /proc is found; the last mount on it is the one seen
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 5 || f[4] != "/proc" {
			continue
		}
		hides = false
		for _, opt := range strings.Split(f[len(f)-1], ",") {
			if v, ok := strings.CutPrefix(opt, "hidepid="); ok && v != "0" && v != "off" {
				hides = true
			}
		}
	}
	return hides
}

package filestore

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// groupsDir holds, per job and slot, the note of its last run's processes on
// this host (NoteGroup): a file named after the job's key, and after the
// slot too for a slot other than the first.
const groupsDir = "groups"

var _ leasestore.GroupNoter = (*Store)(nil)

// dyingGroupWait bounds how long an Acquire waits for the process group of
// a run whose supervisor is gone to die: its watchdog kills the group as
// soon as it learns of the death, within milliseconds, and a run started
// just after the kill should not exit 75 for that. The wait holds the
// job's lock, so other operations on the job wait too; longer would only
// make a frozen watchdog (or a member stuck in the kernel) cost every
// Acquire more before the refusal it gets anyway.
const dyingGroupWait = 100 * time.Millisecond

// groupNote is what proves a run's processes gone: who ran it, in which
// boot and PID namespace, and the process group its child runs in. Its
// text is its fields, space-separated, on one line.
type groupNote struct {
	token int64
	host  procHost // the boot and PID namespace its PIDs mean something in
	pid   int      // the supervisor
	start uint64   // the supervisor's start time (/proc/PID/stat), against PID reuse
	pgid  int      // the child's process group, which the watchdog leads
}

// String is the note as its file holds it.
func (n groupNote) String() string {
	return fmt.Sprintf("%d %s %s %d %d %d\n", n.token, n.host.boot, n.host.pidNS, n.pid, n.start, n.pgid)
}

// parseGroupNote reads a note; a note half-written or of an older format
// is not one.
func parseGroupNote(s string) (groupNote, bool) {
	f := strings.Fields(s)
	if len(f) != 6 || !strings.HasSuffix(s, "\n") {
		return groupNote{}, false
	}
	var n groupNote
	var errs [4]error
	n.token, errs[0] = strconv.ParseInt(f[0], 10, 64)
	n.host = procHost{boot: f[1], pidNS: f[2]}
	n.pid, errs[1] = strconv.Atoi(f[3])
	n.start, errs[2] = strconv.ParseUint(f[4], 10, 64)
	n.pgid, errs[3] = strconv.Atoi(f[5])
	return n, errors.Join(errs[:]...) == nil && n.pid > 0 && n.pgid > 0
}

// groupPath is the path of the group note of key's slot.
func (e *Store) groupPath(key string, slot int) string {
	if slot > 0 {
		key += "." + strconv.Itoa(slot)
	}
	return filepath.Join(e.dataDir, groupsDir, key)
}

// NoteGroup records, for l's run, this process as its supervisor and pgid
// as its child's process group; see leasestore.GroupNoter. It takes no
// lock: a note is read only for the run whose token it carries, and one
// read half-written proves nothing.
func (e *Store) NoteGroup(l *leasestore.Lease, pgid int) error {
	self, err := selfProcess()
	if err != nil {
		return e.unavailable("note the process group", err)
	}
	note := groupNote{token: l.Token, host: self.host, pid: os.Getpid(), start: self.start, pgid: pgid}
	path := e.groupPath(jobKey(l.Job), l.Slot)
	f, err := e.openCreate(path, os.O_WRONLY|os.O_TRUNC)
	if errors.Is(err, os.ErrNotExist) {
		if err := e.mkdirAll(filepath.Dir(path)); err != nil {
			return e.unavailable("note the process group", &fileError{filepath.Dir(path), err})
		}
		f, err = e.openCreate(path, os.O_WRONLY|os.O_TRUNC)
	}
	if err != nil {
		return e.unavailable("note the process group", &fileError{path, err})
	}
	_, err = f.WriteString(note.String())
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return e.unavailable("note the process group", &fileError{path, err})
	}
	return nil
}

// endGone ends, at now, the liveness of each of r's runs that is another
// holder's than holder and whose processes are provably gone from this host
// (see gone, which waits up to wait for a dying group): the run is then a
// crash to count, as if its liveness had expired. A run it cannot prove
// gone is left alone.
func (e *Store) endGone(r *rules.Record, holder string, now time.Time, wait time.Duration) {
	for _, u := range r.LiveRuns(now) {
		if u.Holder == holder {
			continue
		}
		b, err := os.ReadFile(e.groupPath(jobKey(r.Job), u.Slot))
		if err != nil {
			continue
		}
		n, ok := parseGroupNote(string(b))
		if ok && n.token == u.Token && n.pid == u.PID && gone(n, wait) {
			u.LiveUntil = now
		}
	}
}

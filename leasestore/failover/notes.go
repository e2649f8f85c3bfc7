package failover

import (
	"hash/fnv"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// silentFor is how long an endpoint that left a request unanswered is tried
// last. Longer spares more calls the hedge bound's wait on a member that
// stays silent (each process that tries it first pays that bound once);
// shorter brings a member that recovered back to the front sooner, though
// the order only decides which healthy endpoint serves, and one known silent
// that answers while tried last is taken back at once. Ten seconds covers a
// stop-the-world pause, a VM migration's freeze or an election, and costs a
// host with a member down for good one hedged call every ten seconds.
const silentFor = 10 * time.Second

// notesDir is the folder under the state folder (the embedded store's,
// which also holds the outbox) where the notes of silent endpoints live.
const notesDir = "silent-endpoints"

// notes are the files that tell later processes on this host which
// endpoints went silent: one per endpoint, named by a hash of its address,
// holding the time (Unix ms) until which it counts as silent. Reading
// them costs a failed open per endpoint when there is none.
type notes struct{ dir string }

func (n *notes) path(endpoint string) string {
	h := fnv.New64a()
	h.Write([]byte(endpoint))
	return filepath.Join(n.dir, strconv.FormatUint(h.Sum64(), 16))
}

// read returns the time until which endpoint's note says it is silent; the
// zero time when there is no readable note.
func (n *notes) read(endpoint string) time.Time {
	b, err := os.ReadFile(n.path(endpoint))
	if err != nil {
		return time.Time{}
	}
	ms, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}

// mark writes endpoint's note, best effort: a note that cannot be written
// only costs later processes the hedge bound once. It is written whole
// (a temporary file renamed), so a reader never sees half of it.
func (n *notes) mark(endpoint string, until time.Time) {
	if os.MkdirAll(n.dir, 0o700) != nil {
		return
	}
	f, err := os.CreateTemp(n.dir, ".note-")
	if err != nil {
		return
	}
	_, werr := f.WriteString(strconv.FormatInt(until.UnixMilli(), 10))
	cerr := f.Close()
	if werr != nil || cerr != nil || os.Rename(f.Name(), n.path(endpoint)) != nil {
		_ = os.Remove(f.Name())
	}
}

// clear removes endpoint's note, best effort: a note left behind expires.
func (n *notes) clear(endpoint string) { _ = os.Remove(n.path(endpoint)) }

// DefaultNotes is the folder of the notes in the embedded store's state
// folder ($XDG_STATE_HOME/leasectl/silent-endpoints), shared by every
// leasectl process of the user on this host; "" (notes in memory only)
// when that folder cannot be found.
func DefaultNotes() string {
	dir, err := leasestore.StateDir()
	if err != nil {
		return ""
	}
	return filepath.Join(dir, notesDir)
}

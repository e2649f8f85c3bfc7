package leasestore

// GroupNoter is the ability of a driver whose holders all share one host
// (the embedded store) to know when a run is over without hearing from it.
// The supervisor tells it, before the child starts, the process group the
// child runs in; once the run's supervisor and every process of that group
// are provably gone from the host, the store ends the run's liveness at
// once instead of when it expires (docs/semantics.md, Acquire). Store's
// NoteGroup uses it when the driver has it.
type GroupNoter interface {
	// NoteGroup records that l's child runs in process group pgid, with
	// this process as its supervisor. Without the note, the run's lease
	// outlives it until its liveness expires, as on any other store.
	NoteGroup(l *Lease, pgid int) error
}

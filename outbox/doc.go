// Package outbox keeps, on the host, the outcomes of runs that could not be
// recorded in the store in time (a partition, a store down), until a later
// leasectl process on the same host delivers them with
// leasestore.Leaser.RecordLate: the next `leasectl run` for the same store
// and namespace, or `leasectl scan`.
//
// It guarantees that an outcome put is delivered at most once successfully
// (RecordLate is idempotent besides) and kept until then, across processes:
// each outcome is one file, written whole (written aside and renamed), in a
// folder per store and namespace under the host's state folder. It does not
// guarantee delivery: an outbox on a host that never runs leasectl again for
// that store keeps its outcomes, and their runs stay counted as crashes. A
// host crash can lose outcomes written moments before, as it can lose the
// embedded store's last writes.
package outbox

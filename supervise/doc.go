// Package supervise runs one command under a lease: it acquires the lease,
// starts the child in its own process group with the fencing token in its
// environment, renews the lease, forwards signals, and kills the child's
// whole process group the moment the lease can no longer be trusted.
//
// What it guarantees, given a store that keeps acknowledged writes and clocks
// that advance at about the same rate:
//
//   - The child group is SIGKILLed no later than Safety after the send time of
//     the last confirmed renewal, and Safety < TTL, so the child is dead before
//     the store could grant the lease to anyone else.
//   - A "not the holder" answer kills the group at once.
//   - A watchdog process (leasectl re-executing itself) kills the group when
//     the deadline passes without an update or when the supervisor disappears,
//     so a SIGKILLed or SIGSTOPped supervisor never leaves its child running.
//   - On Linux the direct child also gets SIGKILL from the kernel when the
//     supervisor dies (PR_SET_PDEATHSIG), and the supervisor is a child
//     subreaper, so descendants that left the group are found and killed when
//     the run ends.
//
// What it does not guarantee: processes that escape into a new session or
// double-fork away while the supervisor is dead cannot be tracked; and if the
// supervisor and its watchdog are both frozen past the safety window, the
// child may outlive its lease. Downstream writes must check the fencing token.
package supervise

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
//   - A watchdog process (the small leasectl-watchdog, or leasectl re-executing
//     itself when that is not installed beside it) kills the group when
//     the deadline passes without an update or when the supervisor disappears,
//     so a SIGKILLed or SIGSTOPped supervisor never leaves its child running.
//   - On Linux the direct child also gets SIGKILL from the kernel when the
//     supervisor dies (PR_SET_PDEATHSIG), and the supervisor is a child
//     subreaper, so descendants that left the group are found and killed when
//     the run ends.
//
// A job-control stop of the child (Ctrl-Z) stops the supervisor too, so the
// shell gets its terminal back, and SIGCONT resumes both; nothing renews the
// lease meanwhile, so the watchdog kills the group at the deadline unless the
// run is resumed before it (Linux only: elsewhere the child's stops are not
// followed).
//
// What it does not guarantee: processes that escape into a new session or
// double-fork away while the supervisor is dead cannot be tracked; and if the
// supervisor and its watchdog are both frozen past the safety window, the
// child may outlive its lease. An acquire the store does not answer within
// Safety is asked once more (Acquire is idempotent for its holder, so a grant
// whose answer was lost comes back); a grant whose answer is lost on both
// asks is not released: it expires, and is counted as a crash. Downstream
// writes must check the fencing token.
package supervise

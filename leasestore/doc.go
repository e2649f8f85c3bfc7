// Package leasestore defines the Store that leasectl keeps its leases in, the
// errors a store reports, and two implementations: an embedded store in a
// local file (the default, for one host) and a Redis store (for many hosts).
//
// What every Store guarantees:
//
//   - Each transition (acquire, renew, release, crash accounting, quarantine)
//     is one atomic operation in the store.
//   - At most one live lease exists per job at any instant of the store's
//     clock.
//   - Every grant returns a fencing token strictly greater than every token
//     granted before for that job, even after the store lost the job's data:
//     a token is never lower than the store's clock in microseconds.
//   - A crash (evidence of a run without its liveness) is counted exactly
//     once, whether Acquire or Scan finds it.
//
// What it does not guarantee: mutual exclusion after the store loses
// acknowledged writes (a Redis without persistence that restarts, or the
// embedded file deleted while a lease is held). Fencing tokens still rise,
// so a downstream that checks them stays safe.
package leasestore

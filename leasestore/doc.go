// Package leasestore is the contract between leasectl and the stores it
// keeps its leases in: the portable Store that callers hold (the
// supervisor's half, Leaser, and the on-call half, Operator), the Driver
// interface that each store implements beneath it, the requests and
// results they exchange, the typed errors, job-ID and namespace
// validation, URL redaction, and Open, which picks a driver by URL scheme.
// Each store is a driver package that registers itself (filestore: file://, the default; redisstore:
// redis:// and rediss://; etcdstore: etcd:// and etcds://; httpstore:
// https://, any store through a registry) and proves itself against the
// conformance suite in storetest, as Go CDK's blob, blob/driver and
// blob/drivertest do.
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
//   - Acquire by the holder of the live lease returns that lease, so a
//     caller whose answer was lost can ask again.
//
// What it does not guarantee: mutual exclusion after the store loses
// acknowledged writes (a Redis without persistence that restarts, or the
// embedded file deleted while a lease is held). Fencing tokens still rise,
// so a downstream that checks them stays safe.
//
// docs/semantics.md describes each operation in full.
package leasestore

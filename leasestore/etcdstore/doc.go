// Package etcdstore is leasectl's etcd store, for fleets that already run
// etcd: every transition is one etcd transaction guarded by the mod
// revisions of the keys it read; a run's liveness and evidence are keys
// attached to two etcd leases of --ttl and --evidence-ttl, which Renew
// keeps alive and etcd expires on its own, one pair per slot of the job
// (up to 32, Store.Limits); the queue of waiters is in the job's
// record; waiters watch the job's keys, and so does its token feed (leasestore.TokenFeed: one watch per job over
// its record). It registers the etcd:// and etcds:// schemes (Open). docs/etcd.md has the
// key layout, the tokens, the clocks and the measurements.
//
// It talks to etcd through the JSON gateway every member serves on its
// client port (POST /v3/kv/txn, /v3/lease/keepalive, /v3/watch, ...), not
// the official client, go.etcd.io/etcd/client/v3: every leasectl process,
// the watchdog included, pays the package initialisation of every store
// linked in, and the official client's (gRPC, protobuf registries, zap)
// measured 2.9 ms on the 2-core reference machine (GODEBUG=inittrace=1, a
// binary importing it alone: 2.9 ms, against 0.4 ms for one importing
// net/http, encoding/json and crypto/tls), ten times the 0.3 ms budget of
// the whole init check. leasectl links net/http, encoding/json and
// crypto/tls already (the reaper's metrics), so this package adds no
// initialisation beyond registering its schemes. The gateway costs some
// latency per call (JSON, one more hop inside the member) but each
// transition is a handful of calls; docs/etcd.md has the figures.
//
// It guarantees what leasestore.Store promises, with these differences
// (docs/semantics.md): etcd has no clock, so times and tokens come from,
// and acquire deadlines are compared with, the clock of the host doing the
// transition, while liveness expiry is
// etcd's own (its leader's monotonic clock); lease TTLs are whole seconds
// of at least 2 s (Store.Limits); fencing tokens follow the other stores' rule,
// max(last + 1, clock in µs), so they stay comparable when a job moves
// between stores and keep rising after a restore from an older backup.
package etcdstore

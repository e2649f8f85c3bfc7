// Package redisstore is leasectl's Redis store, for many hosts sharing one
// Redis: every transition is one Lua script (lua/, embedded and run with
// EVALSHA), over keys laid out so that each script touches one Redis
// Cluster slot (layout.go, docs/redis-layout.md). It registers the redis://
// and rediss:// schemes for a single server; New takes any go-redis
// UniversalClient. It grants up to leasestore.MaxSlots
// runs of a job at once, and a queue that serves waiters in the order they
// joined, with the rules of package rules written in Lua and held to them
// by the conformance suite's model-based test. A job of one slot keeps the
// keys a leasectl older than slots reads.
//
// It guarantees what leasestore.Store promises as long as Redis keeps the
// writes it acknowledged: with persistence off, a restart forgets leases,
// evidence and history, and fencing tokens still rise (they are never
// below the server's clock in microseconds). A grant or a renewal that a
// silent primary leaves unanswered is copied on fresh connections until
// Sentinel's or the cluster's replacement answers it (copies.go); it does
// not promise that a replacement comes within the caller's window: that
// is down-after-milliseconds or the node timeout, and an election.
// A failover to a replica that missed the last writes may lose a waiter's
// place (it joins again, at the tail, when it next asks), as it may lose a
// grant.
package redisstore

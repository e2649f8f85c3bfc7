// Package redisstore is leasectl's Redis store, for many hosts sharing one
// Redis: every transition is one Lua script (lua/, embedded and run with
// EVALSHA), over keys laid out so that each script touches one Redis
// Cluster slot (layout.go, docs/redis-layout.md). It registers the redis://
// and rediss:// schemes for a single server; New takes any go-redis
// UniversalClient. Renewals asked for at once (a registry's heartbeats)
// share pipelines, each still its own script run with its own answer
// (renewals.go).
//
// It guarantees what leasestore.Store promises as long as Redis keeps the
// writes it acknowledged: with persistence off, a restart forgets leases,
// evidence and history, and fencing tokens still rise (they are never
// below the server's clock in microseconds).
package redisstore

// Package failover sends a store client's request to one of several
// endpoints (etcd members, registries) and, when that endpoint does not
// answer within a bound well inside the caller's deadline, to the next as
// well: the first answer counts, the others are cancelled. It remembers the
// endpoints that went silent, in memory and in a short-lived note in the
// state folder that later processes on the host read, and tries them last
// until they answer again or the note expires.
//
// It guarantees that a request goes to each endpoint at most once per call,
// that no copy is sent after the caller's context ended, and that the
// answer returned is one an endpoint gave. It does not guarantee that the
// copies not returned were not carried out: a request handed to Do must be
// one its store can receive twice, late, without harm (a read, a
// transaction guarded by the revisions it changes, a renewal of the
// caller's own lease); each client says why its requests are.
package failover

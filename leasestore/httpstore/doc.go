// Package httpstore is leasectl's remote store: a leasestore.Store that
// reaches any store through an execution registry (`leasectl serve`,
// package registry) over HTTPS, for workers that may not reach the store
// itself. It registers the https:// scheme, and http:// for a registry on
// a loopback address only. The bearer token comes from LEASECTL_TOKEN;
// LEASECTL_CA_FILE adds trusted roots, and LEASECTL_CLIENT_CERT with
// LEASECTL_CLIENT_KEY present a client certificate.
//
// What it guarantees: the store's own guarantees, since every call is one
// call of the store behind the registry, answered with the store's answer
// (typed refusals keep their data); every call returns by its ctx's
// deadline, with no retry of its own that could outlive it (the HTTP
// transport may send a request again on a fresh connection when the one it
// picked turned out dead, within the same deadline; Acquire may be asked
// again because it is idempotent for its holder); Release is sent with an
// Idempotency-Key derived from the lease and outcome, so that a retry
// after a lost answer gets the first answer instead of ErrLeaseLost. With
// several registries (https://a,b), a call that one leaves unanswered
// past the hedge bound goes to the next as well (leasestore/failover), each
// request carrying its sender's deadline on the registry's clock
// (registries.go), and the holder of an acquire that went to more than one
// gives up on its other grants once its run is refused or released
// (failover.Copies).
//
// RecordLate is the store's RecordLate in the registry. Through an older
// registry whose store did not record late outcomes, or one older than them, it fails with an error matching
// leasestore.ErrUnavailable (ErrNoLateOutcomes when the registry says so),
// so that the outbox keeps the outcome for a later delivery.
//
// It is the source of a token feed (leasestore.TokenSource) when the store
// behind the registry has one (every store of leasectl's): each watch is held by the registry in that store's
// feed and collected with long-polls (one connection each); a failed poll is
// reported Lost and the watch made again with a fresh read, and SyncTokens
// runs the store's heartbeat in the registry, then waits until the watches
// have delivered what it had reached. Through a registry whose store has no
// feed, WatchTokens and SyncTokens fail with ErrNoTokenFeed.
//
// What it does not guarantee: that an ErrUnavailable call did not happen
// (as with any store); delivery of release notifications, which are best
// effort as every store's are: a subscription lives in one registry
// process, and when the registry restarts the subscription is made again
// and the waiter woken once, in case a release was missed.
package httpstore

// Package fence checks fencing tokens downstream: a service that receives
// writes from the children of `leasectl run` (their token is in
// LEASECTL_FENCING_TOKEN) refuses those whose run has been overtaken or has
// ended. A Checker checks the tokens of one store's jobs in one of three
// patterns; its Middleware puts one in front of an HTTP handler. docs/fencing.md
// has the guide and the SQL that makes a database table its own fence.
//
//	store, _ := leasestore.Open(ctx, "redis://localhost:6379", "leasectl") // with redisstore linked in
//	c, _ := fence.New(store, fence.Options{Pattern: fence.BoundedStaleness})
//	defer c.Close()
//	done, err := c.Admit(ctx, job, token) // errors.Is(err, fence.ErrStale): refuse the write
//	if err == nil { write(); done() }
//
// What every pattern guarantees:
//
//   - Kleppmann's rule: a Checker never accepts a token lower than the
//     highest token it has accepted or learned from the store for that job
//     (the high-water mark), whatever the store says later, also after the
//     store lost its data.
//   - A token whose run the checker has learned has ended (released,
//     crashed, or its liveness expired) is refused from memory: no run
//     comes back from that.
//   - A token is accepted only if the store confirmed it as the job's
//     current token with a live run (CheckToken), or the store's own feed
//     reported it as the newest grant: a token nobody granted, such as one
//     above every token of the job, is refused and does not raise the mark.
//   - Admit makes the check and the write one step within the process: no
//     write with an older token runs alongside or after one with a newer
//     token.
//
// What no pattern guarantees: an answer is a snapshot, and between Check and
// the write a newer run can start (Admit closes that window inside the
// process, a conditional write in the database closes it across processes);
// the high-water marks live in memory, so a restarted service, or a job
// forgotten to make room (Options.MaxJobs), starts again from the store's
// word; and several service instances each have their own marks.
//
// Authoritative asks the store on every check that could accept: a token is
// accepted only if it was the current token with a live run when the store
// read it, during the check. It costs a store round trip per accepted write
// (the refusals above, made from memory, cost none). If the store lost the
// job's data (a Redis restarted without persistence), the old token is
// refused: the store no longer knows it.
//
// BoundedStaleness remembers the token the store last confirmed and accepts
// it from memory for MaxStaleness (default 5 s) after the request that
// confirmed it was sent; any other token above the mark is checked with the
// store, any token below it is refused at once (the seed pattern's token 30
// against a cached 41). It does not guarantee that the run is still live:
// for up to MaxStaleness after its lease was lost or released a run may
// still write, unless a newer token reached this Checker first, which ends
// that at once. A store that lost its data is noticed only when the
// confirmation expires.
//
// WriteThrough follows the store's token feed (leasestore.TokenFeed: Redis
// pub/sub, etcd watches, PostgreSQL LISTEN/NOTIFY, the embedded store's
// notification files, a registry's token watches in front of any of them)
// and answers from memory:
// the newest granted token is accepted while its run has not ended, any
// token below it refused, a token above it checked with the store (its grant
// is still on its way). Memory is trusted only while the feed is known to be
// whole: a lost connection falls back to the store as soon as the feed
// notices it (the connection's end is read), and so does a feed whose
// heartbeat (SyncTokens, every Heartbeat, default 1 s) has not succeeded
// for MaxLag (default 3 heartbeats), so a silently stalled feed costs store
// round trips, never a stale acceptance past that bound. It does not
// guarantee: a superseded token can be accepted until the newer grant
// has arrived through the feed, so for up to one delivery delay (bounded by
// MaxLag); a lease that expires without anyone counting its crash publishes
// nothing, so a run whose supervisor died writes until the next grant or the
// reaper's scan; and a Redis wiped without dropping the connection
// (FLUSHALL) is noticed only at the next grant (a restart drops the
// connection, and the read that follows shows the loss; the embedded
// store's heartbeat reads every watched job again, so a removed file is
// noticed within a heartbeat). It also counts on every run being granted by a
// leasectl that publishes its grants (the release that added the token
// feed, or later): an older one's grant reaches the checker only when its
// holder writes through it, or at the run's release.
//
// Several slots: a job run with `leasectl run --slots N` has up to N live
// runs, each with its own token from the job's one rising sequence and its
// slot in LEASECTL_SLOT. Check and Admit keep one mark per job, so of those
// they admit only the newest run. CheckSlot and AdmitSlot (and Middleware,
// given the Leasectl-Slot header) keep a mark per slot from the job's first
// check with a slot on: every rule above then holds per slot, where "a newer
// token" means one accepted in the same slot, and the writes of different
// slots are not ordered against each other. The store's refusals and its
// token feed name the job's newest token but not its slot, so they raise no
// slot's mark; and WriteThrough answers from memory only for the job's
// newest token: the checks of its other live runs ask the store, as
// Authoritative does. The slot is taken on trust: the store confirms that a
// token is live, not which slot it holds. A wrong slot cannot get a token
// accepted that the store refuses, but it can raise the named slot's mark
// above that slot's real run, which is then refused, and it escapes the
// ordering of its real slot (docs/fencing.md, "Several slots").
//
// A token from the future: after the store lost the job's data, its next
// grant is still higher than every token before (a token is never below the
// store's clock in µs), so every pattern checks it with the store, accepts
// it and refuses the old holder from then on. Should the store's clock have
// stepped back too, its new tokens can be lower than a Checker's mark: the
// Checker refuses them (Kleppmann's rule), until the store's clock passes
// the mark again or the service restarts.
package fence

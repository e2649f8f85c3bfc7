package leasestore

import "context"

// TokenFeed is the part of a Store that follows jobs' fencing tokens as
// they change, for checkers downstream that keep a write-through cache
// (package fence). A checker given something that only checks tokens
// (fence.Store) finds it with a type assertion, and asks CheckToken when
// it is not there. The remote store's feed is the registry's, which fails
// with httpstore.ErrNoTokenFeed behind a registry too old to have one.
//
// A feed is best effort, as Subscribe is: a change can be late or lost (a
// dropped connection, a leasectl older than the feed that does not publish
// grants). What it guarantees is that a consumer can tell: a lost
// connection is reported (TokenState.Lost) and followed by a fresh read, and
// SyncTokens, the feed's heartbeat, fails rather than succeed while changes
// may be missing.
type TokenFeed interface {
	// WatchTokens starts following job's fencing state and calls fn with
	// every change: each grant, each end of a run (release, counted crash),
	// and a fresh read after the feed was interrupted. When it returns, the
	// watch is in place and fn has been called once, with the state read
	// from the store after the watch started: every later change reaches fn.
	// ctx bounds only this call.
	//
	// fn is called from the feed's own goroutine, one call at a time per
	// store; it must return quickly and must not call the store or close
	// a watch.
	WatchTokens(ctx context.Context, job string, fn func(TokenState)) (TokenWatch, error)

	// SyncTokens is the feed's heartbeat. It returns nil once every change
	// published before the call, for every job watched through this store,
	// has reached its fn (fn has returned). An error (matching
	// ErrUnavailable) means that could not be shown within ctx: changes may
	// be late or lost.
	SyncTokens(ctx context.Context) error
}

// TokenWatch is one job's watch, started by TokenFeed.WatchTokens.
type TokenWatch interface {
	// Close stops the watch: its fn is not called once Close has returned.
	Close() error
}

// TokenState is a job's fencing state as a TokenFeed reports it.
type TokenState struct {
	Job string
	// Token is the job's newest token as the store reported it: the last
	// granted one, 0 when the store has no record of the job.
	Token int64
	// Live is whether Token's run was live: true for a grant, false once it
	// ended. A lease that expires without anyone counting its crash yet
	// reports no change: Live can stay true after the liveness ran out.
	Live bool
	// Read is true when the state was read from the store (when the watch
	// started, after an interruption, or on a heartbeat) and so replaces what
	// came before; false when it was published by a grant or an end of a run,
	// which may arrive after a read that already includes it.
	Read bool
	// Lost is true when the feed was interrupted: changes may have been
	// missed, and Token and Live mean nothing until the next Read state.
	Lost bool
}

package etcdstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Token changes are the writes of a job's record (<ns>#job/<job>): every
// grant and every end of a run (release, counted crash, late outcome)
// rewrites it in the transaction that makes the change, and the record
// carries the last token and the history that says whether its run ended.
// Each watch is one etcd watch stream over that one key, started at the
// revision after the read that gave its first state, so nothing in between
// is missed; a broken stream is reported lost, read again and started
// again after that read.
//
// The heartbeat (SyncTokens) reads the mod revision of every watched job's
// record, linearizably, and waits until each watch has delivered the
// change of that revision (or read a state at or past it): etcd's gateway
// cannot ask a watch for a progress notification on demand (that is a
// message on the open stream, which HTTP/1.1 cannot send once the answer
// started), and the record's own revision needs none.

// feedReadTimeout bounds one read of a watched job's state by a watch's
// goroutine, after its stream broke; a read that fails is tried again
// after minWatchRetry, doubling up to maxWatchRetry, the watch reported
// lost meanwhile.
const feedReadTimeout = 5 * time.Second

// tokenWatch is one job's watch: one etcd watch stream over its record
// key, followed by its own goroutine.
type tokenWatch struct {
	s      *Store
	job    string
	fn     func(leasestore.TokenState)
	cancel context.CancelFunc
	done   chan struct{}

	// Guarded by s.feedMu.
	closed    bool
	lost      bool                  // interrupted, and not read again since
	broke     error                 // why the stream last broke, for SyncTokens's error
	last      leasestore.TokenState // what fn was last called with
	exists    bool                  // the record existed in the last state delivered
	delivered int64                 // the revision fn has seen every change up to
}

// WatchTokens starts following job's fencing state; see
// leasestore.TokenFeed. It reads the job's keys, opens a watch stream over
// its record from the revision after that read and, once etcd confirmed
// it, calls fn with the state read.
func (s *Store) WatchTokens(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	s.feedMu.Lock()
	closed := s.feedClosed
	s.feedMu.Unlock()
	if closed {
		return nil, s.unavailable("watch tokens", errors.New("the store is closed"))
	}
	st, rev, exists, err := s.readTokens(ctx, job)
	if err != nil {
		return nil, err
	}
	wctx, cancel := context.WithCancel(context.Background())
	stream, err := s.openTokenStream(ctx, wctx, job, rev+1)
	if err != nil {
		cancel()
		return nil, s.unavailable("watch tokens", err)
	}
	w := &tokenWatch{s: s, job: job, fn: fn, cancel: cancel, done: make(chan struct{})}
	s.feedMu.Lock()
	if s.feedClosed {
		s.feedMu.Unlock()
		cancel()
		stream.Close()
		return nil, s.unavailable("watch tokens", errors.New("the store is closed"))
	}
	if s.tokenWatches == nil {
		s.tokenWatches = map[*tokenWatch]struct{}{}
	}
	s.tokenWatches[w] = struct{}{}
	w.deliverLocked(st, rev, exists)
	s.feedMu.Unlock()
	go w.run(wctx, stream)
	return w, nil
}

// readTokens reads job's state, the revision it was read at and whether
// the job has a record. Live is as CheckToken judges it: the liveness and
// the evidence are there with the last token.
func (s *Store) readTokens(ctx context.Context, job string) (st leasestore.TokenState, rev int64, exists bool, err error) {
	var resp txnResponse
	if err := s.c.call(ctx, "/v3/kv/txn", txnRequest{Success: s.readOps(job)}, &resp); err != nil {
		return st, 0, false, s.unavailable("watch tokens", err)
	}
	states, err := parseStates([]string{job}, resp.Responses)
	if err != nil {
		return st, 0, false, s.unavailable("watch tokens", err)
	}
	js := states[0]
	token := js.rec.LastToken
	live := js.live != nil && js.liveToken == token && js.evd != nil && js.evd.Token == token
	return leasestore.TokenState{Job: job, Token: token, Live: live, Read: true}, resp.Header.Revision, js.doc != nil, nil
}

// openTokenStream opens a watch stream over job's record from revision
// start and returns it once etcd confirmed the watch. ctx bounds the wait
// for the confirmation; the stream lives as long as wctx.
func (s *Store) openTokenStream(ctx, wctx context.Context, job string, start int64) (*tokenStream, error) {
	body, err := json.Marshal(watchRequest{Create: &watchCreate{Key: s.key(kindJob, job), StartRevision: start}})
	if err != nil {
		return nil, err
	}
	// The stream outlives ctx, which bounds only the confirmation: the
	// request is made on wctx and abandoned if ctx ends first.
	sctx, cancel := context.WithCancel(wctx)
	stop := context.AfterFunc(ctx, cancel)
	body2, err := s.c.stream(sctx, "/v3/watch", body)
	if err != nil {
		stop()
		cancel()
		return nil, err
	}
	ts := &tokenStream{body: body2, dec: json.NewDecoder(body2), cancel: cancel}
	var msg watchResponse
	err = ts.dec.Decode(&msg)
	switch {
	case err != nil:
	case msg.Error != nil:
		err = msg.Error
	case msg.Result == nil || !msg.Result.Created:
		err = errUnexpected
	case msg.Result.Canceled:
		err = fmt.Errorf("watch refused (compacted at revision %d)", msg.Result.CompactRevision)
	}
	if !stop() && err == nil {
		err = ctx.Err()
	}
	if err != nil {
		ts.Close()
		return nil, err
	}
	return ts, nil
}

// tokenStream is an open watch stream over one record key.
type tokenStream struct {
	body   io.ReadCloser
	dec    *json.Decoder
	cancel context.CancelFunc
}

func (t *tokenStream) Close() {
	t.cancel()
	t.body.Close()
}

// run follows the stream until the watch is closed; a stream that breaks
// is reported lost, and followed again from a fresh read.
func (w *tokenWatch) run(ctx context.Context, stream *tokenStream) {
	defer close(w.done)
	for {
		err := w.follow(ctx, stream)
		stream.Close()
		if ctx.Err() != nil {
			return
		}
		w.deliverLost(err)
		if stream = w.reopen(ctx); stream == nil {
			return
		}
	}
}

// follow reports the changes the stream delivers until it breaks.
func (w *tokenWatch) follow(ctx context.Context, stream *tokenStream) error {
	for {
		var msg watchResponse
		if err := stream.dec.Decode(&msg); err != nil {
			return err
		}
		if msg.Error != nil {
			return msg.Error
		}
		r := msg.Result
		if r == nil {
			return errUnexpected
		}
		if r.Canceled {
			return fmt.Errorf("watch cancelled (compacted at revision %d)", r.CompactRevision)
		}
		for _, e := range r.Events {
			if err := w.changed(ctx, e.Type == "DELETE", e.KV); err != nil {
				return err
			}
		}
	}
}

// changed reports the record write kv at its revision: a put says the
// last token, and its history whether that token's run ended; a deletion
// (keys deleted by an operator) leaves a job the store has no record of,
// reported as a read, since it replaces every token before it.
func (w *tokenWatch) changed(ctx context.Context, deleted bool, kv keyValue) error {
	if deleted {
		w.deliver(leasestore.TokenState{Job: w.job, Read: true}, kv.ModRevision, false)
		return nil
	}
	var r record
	live, ok := false, false
	if json.Unmarshal(kv.Value, &r) == nil {
		live, ok = r.runLive()
	}
	if !ok {
		// The history no longer says (or the record is not leasectl's):
		// only a read does, at a revision that includes this write.
		rctx, cancel := context.WithTimeout(ctx, feedReadTimeout)
		defer cancel()
		st, rev, exists, err := w.s.readTokens(rctx, w.job)
		if err != nil {
			return err
		}
		w.deliver(st, rev, exists)
		return nil
	}
	w.deliver(leasestore.TokenState{Job: w.job, Token: r.LastToken, Live: live}, kv.ModRevision, true)
	return nil
}

// runLive says whether the run of the record's last token is live: the
// newest event of that run in the history is its grant, not its end. ok is
// false when no event of it is left in the history (twenty events without
// a grant, such as an operator's quarantines).
func (r *record) runLive() (live, ok bool) {
	if r.LastToken == 0 {
		return false, true
	}
	for i := len(r.History) - 1; i >= 0; i-- {
		e := r.History[i]
		if e.Token != r.LastToken {
			continue
		}
		switch e.Kind {
		case leasestore.EventAcquired:
			return true, true
		case leasestore.EventReleased, leasestore.EventCrashed, leasestore.EventLateOutcome:
			return false, true
		}
	}
	return false, false
}

// reopen reads the job's state and opens a stream from the revision after
// it, trying again until it succeeds or the watch is closed (nil).
func (w *tokenWatch) reopen(ctx context.Context) *tokenStream {
	retry := minWatchRetry
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
		retry = min(2*retry, maxWatchRetry)
		rctx, cancel := context.WithTimeout(ctx, feedReadTimeout)
		st, rev, exists, err := w.s.readTokens(rctx, w.job)
		var stream *tokenStream
		if err == nil {
			stream, err = w.s.openTokenStream(rctx, ctx, w.job, rev+1)
		}
		cancel()
		if err != nil {
			continue
		}
		w.deliver(st, rev, exists)
		return stream
	}
}

// deliver calls fn with st, a state that includes every change up to
// revision rev, unless the watch is closed or st tells nothing new.
func (w *tokenWatch) deliver(st leasestore.TokenState, rev int64, exists bool) {
	w.s.feedMu.Lock()
	defer w.s.feedMu.Unlock()
	w.deliverLocked(st, rev, exists)
}

// deliverLocked is deliver with s.feedMu held. A published state that
// repeats the last one is left out, and so is one that says a run is live
// again after a state said it was not: a grant always has a new token, so
// that is a write after the run's liveness expired (a lease-lost event, an
// operator's quarantine), which the read before it judged better.
func (w *tokenWatch) deliverLocked(st leasestore.TokenState, rev int64, exists bool) {
	// A read at a later revision can overtake events still in the stream
	// (changed reads the job when the history forgot its run): an event
	// older than what fn already has would undo that read.
	if w.closed || rev < w.delivered {
		return
	}
	last := w.last
	w.delivered, w.exists = rev, exists
	defer w.s.progressed()
	if !st.Read && !w.lost && st.Token == last.Token && (st.Live == last.Live || st.Live && !last.Live) {
		return
	}
	w.lost, w.last = false, st
	w.fn(st)
}

// deliverLost tells fn that changes may have been missed, because the
// stream broke with err.
func (w *tokenWatch) deliverLost(err error) {
	w.s.feedMu.Lock()
	defer w.s.feedMu.Unlock()
	if w.closed {
		return
	}
	w.lost, w.broke = true, err
	w.last = leasestore.TokenState{Job: w.job, Lost: true}
	w.fn(w.last)
}

// progressed wakes the heartbeats waiting on a delivery; s.feedMu is held.
func (s *Store) progressed() {
	if s.feedProgress != nil {
		close(s.feedProgress)
		s.feedProgress = nil
	}
}

// Close stops the watch; fn is not called once it has returned.
func (w *tokenWatch) Close() error {
	w.s.feedMu.Lock()
	w.closed = true
	delete(w.s.tokenWatches, w)
	w.s.feedMu.Unlock()
	w.cancel()
	<-w.done
	return nil
}

// closeTokenWatches stops every token watch, when the Store is closed.
func (s *Store) closeTokenWatches() {
	s.feedMu.Lock()
	s.feedClosed = true
	watches := make([]*tokenWatch, 0, len(s.tokenWatches))
	for w := range s.tokenWatches {
		watches = append(watches, w)
	}
	s.feedMu.Unlock()
	for _, w := range watches {
		_ = w.Close()
	}
}

// SyncTokens is the feed's heartbeat; see leasestore.TokenFeed. It reads
// the mod revision of every watched job's record in one linearizable read
// (40 jobs to a transaction), then waits until each watch has delivered
// the write of that revision, or a read at or past it: every change
// committed before the call has then reached its fn. A record deleted
// before the call is waited for until its watch reports the deletion.
func (s *Store) SyncTokens(ctx context.Context) error {
	s.feedMu.Lock()
	jobs := map[string]bool{}
	for w := range s.tokenWatches {
		jobs[w.job] = true
	}
	s.feedMu.Unlock()
	if len(jobs) == 0 {
		return nil
	}
	list := make([]string, 0, len(jobs))
	for job := range jobs {
		list = append(list, job)
	}
	revs := map[string]int64{} // job → its record's mod revision; 0: none
	for start := 0; start < len(list); start += batchJobs {
		batch := list[start:min(start+batchJobs, len(list))]
		var ops []requestOp
		for _, job := range batch {
			ops = append(ops, requestOp{Range: &rangeRequest{Key: s.key(kindJob, job), KeysOnly: true}})
		}
		var resp txnResponse
		if err := s.c.call(ctx, "/v3/kv/txn", txnRequest{Success: ops}, &resp); err != nil {
			return s.unavailable("sync tokens", err)
		}
		if len(resp.Responses) != len(batch) {
			return s.unavailable("sync tokens", fmt.Errorf("%d answers to %d reads", len(resp.Responses), len(batch)))
		}
		for i, job := range batch {
			if r := resp.Responses[i].Range; r != nil && len(r.KVs) > 0 {
				revs[job] = r.KVs[0].ModRevision
			}
		}
	}
	for {
		s.feedMu.Lock()
		behind := 0
		var broke error
		for w := range s.tokenWatches {
			rev, known := revs[w.job], jobs[w.job]
			if !known {
				continue // started after the read: it read its own state
			}
			if w.lost || rev == 0 && w.exists || rev > w.delivered {
				behind++
				if w.lost && broke == nil {
					broke = w.broke
				}
			}
		}
		if behind == 0 {
			s.feedMu.Unlock()
			return nil
		}
		if s.feedProgress == nil {
			s.feedProgress = make(chan struct{})
		}
		wait := s.feedProgress
		s.feedMu.Unlock()
		select {
		case <-wait:
		case <-ctx.Done():
			err := fmt.Errorf("%d watches have not delivered the changes made before the heartbeat: %w", behind, ctx.Err())
			if broke != nil {
				err = fmt.Errorf("%w (a watch stream broke: %v)", err, broke)
			}
			return s.unavailable("sync tokens", err)
		}
	}
}

package etcdstore

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Token changes are the writes of a job's record (<ns>#job/<job>): every
// grant and every end of a run (release, counted crash, late outcome)
// rewrites it in the transaction that makes the change, and the record
// carries the last token and the history that says whether its run ended.
// Each job followed is one etcd watch stream over that one key, which
// hands its changes to the hub (leasestore.TokenHub); a broken stream is
// reported lost, opened again, and the job read again after that.
//
// The heartbeat (SyncTokens) reads the mod revision of every followed
// job's record, linearizably, and waits until each job's changes up to
// that revision have reached the hub, by its stream or by a read at or
// past it: etcd's gateway cannot ask a watch for a progress notification
// on demand (that is a message on the open stream, which HTTP/1.1 cannot
// send once the answer started), and the record's own revision needs
// none.

// feedReadTimeout bounds one read of a followed job's state by its
// stream's goroutine, after the stream broke or when a write did not say
// what changed.
const feedReadTimeout = 5 * time.Second

// StartTokens returns the Store's side of its token feed, a watch stream
// per job followed; see leasestore.Driver.
func (s *Store) StartTokens(_ context.Context, hub *leasestore.TokenHub) (leasestore.TokenSource, error) {
	if !s.feedStarted.CompareAndSwap(false, true) {
		return nil, leasestore.ErrFeedStarted
	}
	return &tokenSource{s: s, hub: hub, streams: map[string]*jobStream{}, progress: make(chan struct{})}, nil
}

// tokenSource is the Store's side of its token feed (leasestore.TokenSource): a watch
// stream per job followed, and how far each has reached the hub.
type tokenSource struct {
	s   *Store
	hub *leasestore.TokenHub

	mu       sync.Mutex
	streams  map[string]*jobStream
	progress chan struct{} // closed and replaced when a job's reach grows
}

// jobStream is the watch stream of one job, followed by its own goroutine.
type jobStream struct {
	cancel context.CancelFunc
	done   chan struct{}
	// Guarded by tokenSource.mu.
	reached int64 // the revision every change up to which reached the hub
	exists  bool  // the record existed at that revision
	broke   error // why the stream last broke, for SyncTokens's error
}

// Follow opens a watch stream over job's record, from the revision after
// etcd's current one, and returns once etcd confirmed it.
func (f *tokenSource) Follow(ctx context.Context, job string) error {
	wctx, cancel := context.WithCancel(context.Background())
	stream, err := f.s.openTokenStream(ctx, wctx, job, 0)
	if err != nil {
		cancel()
		return f.s.unavailable("watch tokens", err)
	}
	js := &jobStream{cancel: cancel, done: make(chan struct{})}
	f.mu.Lock()
	f.streams[job] = js
	f.mu.Unlock()
	go f.run(wctx, job, js, stream)
	return nil
}

// Unfollow closes job's stream.
func (f *tokenSource) Unfollow(job string) {
	f.mu.Lock()
	js := f.streams[job]
	delete(f.streams, job)
	f.mu.Unlock()
	if js != nil {
		js.cancel()
		<-js.done
	}
}

// Read reads job's state, and counts the revision it was read at as
// reached.
func (f *tokenSource) Read(ctx context.Context, job string) (leasestore.TokenState, error) {
	st, rev, exists, err := f.s.readTokens(ctx, job)
	if err == nil {
		f.reached(job, rev, exists)
	}
	return st, err
}

// reached records that job's changes up to rev have reached the hub (or
// are being delivered under the hub's lock of the job, which Barrier waits
// out).
func (f *tokenSource) reached(job string, rev int64, exists bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if js := f.streams[job]; js != nil && rev >= js.reached {
		js.reached, js.exists = rev, exists
		close(f.progress)
		f.progress = make(chan struct{})
	}
}

// readTokens reads job's state, the revision it was read at and whether
// the job has a record. Live is as CheckToken judges it: a slot's liveness
// and evidence are there with the last token.
func (s *Store) readTokens(ctx context.Context, job string) (st leasestore.TokenState, rev int64, exists bool, err error) {
	var resp txnResponse
	if err := s.c.call(ctx, "/v3/kv/txn", txnRequest{Success: s.readOps(job)}, &resp); err != nil {
		return st, 0, false, s.unavailable("watch tokens", err)
	}
	states, err := s.parseStates([]string{job}, resp.Responses, resp.Header.Revision)
	if err != nil {
		return st, 0, false, s.unavailable("watch tokens", err)
	}
	js := states[0]
	at := now()
	live := js.asRecord(at).LastLive(at)
	return leasestore.TokenState{Job: job, Token: js.rec.LastToken, Live: live, Read: true}, resp.Header.Revision, js.doc != nil, nil
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

// run follows job's stream until it is closed; a stream that breaks is
// reported lost, opened again, and the job read again after that.
func (f *tokenSource) run(ctx context.Context, job string, js *jobStream, stream *tokenStream) {
	defer close(js.done)
	for {
		err := f.follow(ctx, job, stream)
		stream.Close()
		if ctx.Err() != nil {
			return
		}
		f.mu.Lock()
		js.broke = err
		f.mu.Unlock()
		f.hub.Lost(job)
		if stream = f.reopen(ctx, job); stream == nil {
			return
		}
	}
}

// follow hands the changes the stream delivers to the hub until it breaks.
func (f *tokenSource) follow(ctx context.Context, job string, stream *tokenStream) error {
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
			if err := f.changed(ctx, job, e.Type == "DELETE", e.KV); err != nil {
				return err
			}
		}
	}
}

// changed hands the hub the record write kv: a put says the last token,
// and its history whether that token's run ended; a deletion (keys deleted
// by an operator) leaves a job the store has no record of, handed on as a
// read, since it replaces every token before it.
func (f *tokenSource) changed(ctx context.Context, job string, deleted bool, kv keyValue) error {
	if deleted {
		f.hub.Publish(leasestore.TokenState{Job: job, Read: true})
		f.reached(job, kv.ModRevision, false)
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
		return f.hub.Reread(rctx, false, job)
	}
	f.hub.Publish(leasestore.TokenState{Job: job, Token: r.LastToken, Live: live})
	f.reached(job, kv.ModRevision, true)
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

// reopen opens job's stream again and has the hub read the job after
// that, trying again until both succeed or the stream is closed (nil).
func (f *tokenSource) reopen(ctx context.Context, job string) *tokenStream {
	retry := minWatchRetry
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(retry):
		}
		retry = min(2*retry, maxWatchRetry)
		rctx, cancel := context.WithTimeout(ctx, feedReadTimeout)
		stream, err := f.s.openTokenStream(rctx, ctx, job, 0)
		if err == nil {
			if err = f.hub.Reread(rctx, true, job); err != nil {
				stream.Close()
			}
		}
		cancel()
		if err == nil {
			return stream
		}
	}
}

// Barrier reads the mod revision of every followed job's record in one
// linearizable read (40 jobs to a transaction), then waits until each
// job's changes up to that revision have reached the hub; then every
// change committed before the call has. A record deleted before the call
// is waited for until its stream reports the deletion. Lost jobs are left
// to the hub, which fails the heartbeat for them.
func (f *tokenSource) Barrier(ctx context.Context) error {
	jobs := f.hub.Jobs()
	revs := map[string]int64{} // job → its record's mod revision; 0: none
	for start := 0; start < len(jobs); start += batchJobs {
		batch := jobs[start:min(start+batchJobs, len(jobs))]
		var ops []requestOp
		for _, job := range batch {
			ops = append(ops, requestOp{Range: &rangeRequest{Key: f.s.key(kindJob, job), KeysOnly: true}})
		}
		var resp txnResponse
		if err := f.s.c.call(ctx, "/v3/kv/txn", txnRequest{Success: ops}, &resp); err != nil {
			return f.s.unavailable("sync tokens", err)
		}
		if len(resp.Responses) != len(batch) {
			return f.s.unavailable("sync tokens", fmt.Errorf("%d answers to %d reads", len(resp.Responses), len(batch)))
		}
		for i, job := range batch {
			if r := resp.Responses[i].Range; r != nil && len(r.KVs) > 0 {
				revs[job] = r.KVs[0].ModRevision
			}
		}
	}
	lost := map[string]bool{}
	for _, job := range f.hub.LostJobs() {
		lost[job] = true
	}
	for {
		f.mu.Lock()
		behind := 0
		var broke error
		for _, job := range jobs {
			js := f.streams[job]
			if js == nil || lost[job] {
				continue // closed, or the hub's to report
			}
			if rev := revs[job]; rev == 0 && js.exists || rev > js.reached {
				behind++
				broke = cmp.Or(broke, js.broke)
			}
		}
		wait := f.progress
		f.mu.Unlock()
		if behind == 0 {
			f.hub.Settle(jobs...)
			return nil
		}
		select {
		case <-wait:
		case <-ctx.Done():
			err := fmt.Errorf("%d watches have not delivered the changes made before the heartbeat: %w", behind, ctx.Err())
			if broke != nil {
				err = fmt.Errorf("%w (a watch stream broke: %v)", err, broke)
			}
			return f.s.unavailable("sync tokens", err)
		}
	}
}

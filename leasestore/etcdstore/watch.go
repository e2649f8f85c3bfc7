package etcdstore

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// Reconnection of a broken watch: the first try comes after
// minWatchRetry, doubling up to maxWatchRetry, so that a member restart is
// noticed quickly and a cluster that is down is not hammered.
const (
	minWatchRetry = 50 * time.Millisecond
	maxWatchRetry = time.Second
)

// watchConfirmBound bounds the wait for a member to confirm a stream's
// watches, which it does from its own store in milliseconds, without a
// consensus round: a member that has not by then is silent (a partition
// that swallows the request and keeps the connection open), and the
// stream goes to the next member, as a call would past the hedge bound.
const watchConfirmBound = time.Second

// Subscribe starts delivering job's release notifications; see
// leasestore.Leaser. It opens one etcd watch stream over the liveness and
// evidence keys of every slot of the job and its quarantine key, which
// reports their deletions (a release, a lease that expired, a crash
// counted, a quarantine released), and over its record, whose count of
// wake-ups (record.Wakes) a transition that frees a slot for the queue's
// next waiter without deleting a key moves (a waiter leaving); it returns
// once etcd confirmed all four watches: every such change after that
// revision is delivered. A stream that breaks is opened again from
// the revision after the last one it reported, so nothing in between is
// lost (unlike pub/sub), and the waiter is woken once in case it was.
//
// A subscription made for a waiter wakes it only in its turn: a record
// whose wake-ups moved names the waiters whose turn it is (record.Turn),
// and a deletion is taken for a wake-up of its own only when no such
// record comes with it, in the same revision, within turnGrace: a lease
// that expired, or a leasectl older than Turn.
func (s *Store) Subscribe(ctx context.Context, job, waiter string) (leasestore.Subscription, error) {
	wctx, cancel := context.WithCancel(context.Background())
	sub := &subscription{s: s, job: job, waiter: waiter, released: make(chan struct{}, 1), cancel: cancel, done: make(chan struct{})}
	created := make(chan error, 1)
	go sub.run(wctx, created)
	select {
	case err := <-created:
		if err != nil {
			cancel()
			<-sub.done
			return nil, s.unavailable("subscribe", err)
		}
		return sub, nil
	case <-ctx.Done():
		cancel()
		<-sub.done
		return nil, s.unavailable("subscribe", ctx.Err())
	}
}

// turnGrace is how long a waiter's subscription waits, after a deletion,
// for the record of the same revision that says whose turn it is: etcd
// sends each of a stream's watches its own message, one right after the
// other. Past it the deletion wakes the waiter (a lease expired).
const turnGrace = 10 * time.Millisecond

// subscription turns the deletions a watch reports into coalesced
// wake-ups.
type subscription struct {
	s        *Store
	job      string
	waiter   string // "": every wake-up
	released chan struct{}
	cancel   context.CancelFunc
	done     chan struct{}

	mu       sync.Mutex
	decided  int64 // the last revision whose record said whose turn it was
	deferred int64 // the revision of a deletion waiting for that record
}

// run watches until the subscription is closed, reporting on created the
// outcome of the first stream's creation, once: success once a member
// confirmed the watches, failure once every member failed to.
func (w *subscription) run(ctx context.Context, created chan<- error) {
	defer close(w.done)
	var once sync.Once
	confirmed := false
	report := func(err error) { once.Do(func() { created <- err }) }
	var next int64 // the revision the next stream starts from; 0: now
	retry := minWatchRetry
	for tries := 1; ; tries++ {
		rev, err := w.watch(ctx, next, func() { confirmed = true; report(nil) })
		if !confirmed && err != nil && (tries == len(w.s.c.endpoints.Names()) || ctx.Err() != nil) {
			report(err)
			return
		}
		if !confirmed {
			continue // the next member, at once
		}
		if ctx.Err() != nil {
			return
		}
		if rev > 0 {
			next, retry = rev+1, minWatchRetry
		}
		w.wake()
		select {
		case <-ctx.Done():
			return
		case <-time.After(retry):
		}
		retry = min(2*retry, maxWatchRetry)
	}
}

// watch runs one watch stream from revision start (0: the current one) and
// returns the last revision it reported, when the stream ends. It calls
// created once the four watches are in place.
func (w *subscription) watch(ctx context.Context, start int64, created func()) (last int64, err error) {
	live, ev := w.s.slotsRange(kindLive, w.job), w.s.slotsRange(kindEvidence, w.job)
	watches := []watchCreate{
		{Key: live.Key, RangeEnd: live.RangeEnd, Filters: []string{"NOPUT"}},
		{Key: ev.Key, RangeEnd: ev.RangeEnd, Filters: []string{"NOPUT"}},
		{Key: w.s.key(kindQuarantined, w.job), Filters: []string{"NOPUT"}},
		{Key: w.s.key(kindJob, w.job), Filters: []string{"NODELETE"}, PrevKV: true},
	}
	var body []byte
	for _, c := range watches {
		c.StartRevision = start
		b, err := json.Marshal(watchRequest{Create: &c})
		if err != nil {
			return 0, err
		}
		body = append(body, b...)
	}
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var silent atomic.Bool
	unconfirmed := time.AfterFunc(watchConfirmBound, func() { silent.Store(true); cancel() })
	defer unconfirmed.Stop()
	defer func() {
		if err != nil && silent.Load() && ctx.Err() == nil {
			err = fmt.Errorf("the member did not confirm the watch within %s", watchConfirmBound)
		}
	}()
	stream, err := w.s.c.stream(sctx, "/v3/watch", body)
	if err != nil {
		return 0, err
	}
	defer stream.Close()
	dec := json.NewDecoder(stream)
	pending := len(watches) // watches not yet confirmed
	for {
		var msg watchResponse
		if err := dec.Decode(&msg); err != nil {
			return last, err
		}
		if msg.Error != nil {
			return last, msg.Error
		}
		r := msg.Result
		if r == nil {
			return last, errUnexpected
		}
		if r.Canceled {
			// Compacted past start, or refused: start afresh from now.
			return 0, fmt.Errorf("watch cancelled (compacted at revision %d)", r.CompactRevision)
		}
		if r.Created {
			last = max(last, r.Header.Revision)
			if pending--; pending == 0 && unconfirmed.Stop() {
				created()
			}
			continue
		}
		for _, e := range r.Events {
			last = max(last, e.KV.ModRevision)
			w.event(e)
		}
	}
}

// event handles one watched change: a deletion, or a write of the job's
// record.
func (w *subscription) event(e watchEvent) {
	if e.Type != "DELETE" {
		prev, now := wakesOf(e.PrevKV), wakesOf(&e.KV)
		if prev.Wakes == now.Wakes {
			return // a waiter joining the queue, a grant: nobody's turn came
		}
		if w.waiter == "" || now.Turn == nil || slices.Contains(*now.Turn, w.waiter) {
			w.wake()
		}
		w.mu.Lock()
		w.decided = e.KV.ModRevision
		w.mu.Unlock()
		return
	}
	if w.waiter == "" {
		w.wake()
		return
	}
	rev := e.KV.ModRevision
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.decided == rev || w.deferred == rev {
		return
	}
	w.deferred = rev
	time.AfterFunc(turnGrace, func() {
		w.mu.Lock()
		undecided := w.decided != rev
		w.mu.Unlock()
		if undecided {
			w.wake()
		}
	})
}

// wakesOf reads the count of wake-ups of a record and the waiters whose
// turn it was at the last (nil kv: none; a nil Turn: written by a
// leasectl older than it, which wakes every waiter).
func wakesOf(kv *keyValue) (r struct {
	Wakes int64     `json:"wakes"`
	Turn  *[]string `json:"turn"`
}) {
	if kv != nil {
		_ = json.Unmarshal(kv.Value, &r)
	}
	return r
}

func (w *subscription) wake() {
	select {
	case w.released <- struct{}{}:
	default:
	}
}

// Released receives a value after a release; values coalesce.
func (w *subscription) Released() <-chan struct{} { return w.released }

// Close stops the watch and closes its stream.
func (w *subscription) Close() error {
	w.cancel()
	<-w.done
	return nil
}

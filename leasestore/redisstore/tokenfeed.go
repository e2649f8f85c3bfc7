package redisstore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
)

// Payloads on a job's notification channel (lua/lib.lua): a grant, the end
// of a run, each followed by the token; a quarantine release.
const (
	grantPrefix         = "g"
	endPrefix           = "e"
	unquarantinePayload = "u"
)

const (
	// feedReadTimeout bounds one read of a watched job's state, after its
	// watch subscribed or re-subscribed. A read that fails leaves the watch
	// lost (its checker asks the store) until SyncTokens subscribes again.
	feedReadTimeout = 5 * time.Second

	// feedRetry is how long the feed waits after a failed receive before it
	// receives again (go-redis reconnects and re-subscribes in between):
	// short, since every watch is reported lost meanwhile and its checker
	// asks the store on every check; long enough not to spin on a server
	// that is down.
	feedRetry = 100 * time.Millisecond

	// unsubscribeTimeout bounds the UNSUBSCRIBE sent when a job's last watch
	// closes; if it fails, the channel's messages are received and dropped.
	unsubscribeTimeout = time.Second
)

// WatchTokens starts following job's fencing state; see
// leasestore.TokenFeed. The first watch of a Store opens its one pub/sub
// connection for all watches, and a goroutine that receives on it.
func (s *Store) WatchTokens(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	f, err := s.tokenFeed()
	if err != nil {
		return nil, err
	}
	return f.watch(ctx, job, fn)
}

// SyncTokens is the feed's heartbeat; see leasestore.TokenFeed. It
// publishes a marker on the heartbeat channel of every shard with a watched
// job, from the server that owns the shard (lua/sync.lua), and returns once
// every marker came back: notifications travel the same way, so all those
// published before have arrived.
func (s *Store) SyncTokens(ctx context.Context) error {
	s.feedMu.Lock()
	f := s.feed
	s.feedMu.Unlock()
	if f == nil {
		return nil
	}
	return f.sync(ctx)
}

// tokenFeed returns the Store's feed, starting it on first use.
func (s *Store) tokenFeed() (*tokenFeed, error) {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	if s.feedClosed {
		return nil, s.unavailable("watch tokens", redis.ErrClosed)
	}
	if s.feed == nil {
		id := make([]byte, 8)
		_, _ = rand.Read(id)
		ctx, cancel := context.WithCancel(context.Background())
		s.feed = &tokenFeed{
			s: s, ps: s.rdb.Subscribe(ctx), id: hex.EncodeToString(id), ctx: ctx, cancel: cancel,
			done: make(chan struct{}), watches: map[string][]*tokenWatch{}, beats: map[string]*beat{},
			shards: map[string]int{},
		}
		go s.feed.run()
	}
	return s.feed, nil
}

// closeFeed stops the Store's feed, if it was started.
func (s *Store) closeFeed() {
	s.feedMu.Lock()
	f := s.feed
	s.feedClosed = true
	s.feedMu.Unlock()
	if f != nil {
		f.cancel()
		_ = f.ps.Close()
		<-f.done
	}
}

// tokenFeed is the Store's leasestore.TokenFeed: one pub/sub connection,
// subscribed to the watched jobs' notification channels and their shards'
// heartbeat channels, and one goroutine (run) that receives on it, reads
// states and calls the watches' fns.
type tokenFeed struct {
	s      *Store
	ps     *redis.PubSub
	id     string // makes this feed's heartbeat markers unique
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu      sync.Mutex
	watches map[string][]*tokenWatch // by notification channel
	shards  map[string]int           // heartbeat channel -> shard, of every shard ever watched
	beats   map[string]*beat         // pending heartbeats by marker
	seq     uint64
}

// tokenWatch is one watch of one job.
type tokenWatch struct {
	f       *tokenFeed
	job     string
	channel string
	fn      func(leasestore.TokenState)

	// mu is held while fn runs, so that Close returns only when fn is done.
	mu     sync.Mutex
	closed bool

	// Guarded by f.mu, written only by run.
	synced bool          // fn has had a read since the watch started or was lost
	ready  chan struct{} // closed after the first read
}

// beat is one heartbeat waiting for its marker on every shard it was sent to.
type beat struct {
	left map[string]bool // heartbeat channels whose marker has not come back
	done chan struct{}
}

// watch adds a watch of job and waits until it has its first state.
func (f *tokenFeed) watch(ctx context.Context, job string, fn func(leasestore.TokenState)) (leasestore.TokenWatch, error) {
	shard := shardOf(job)
	w := &tokenWatch{f: f, job: job, channel: f.s.channel(job), fn: fn, ready: make(chan struct{})}
	hb := f.s.heartbeatChannel(shard)
	f.mu.Lock()
	f.watches[w.channel] = append(f.watches[w.channel], w)
	f.shards[hb] = shard
	f.mu.Unlock()
	// Every watch subscribes, even to a channel already subscribed: the
	// confirmation is what tells run to read the new watch's first state,
	// in order with the channel's messages.
	if err := f.ps.Subscribe(ctx, hb, w.channel); err != nil {
		_ = w.Close()
		return nil, f.s.unavailable("watch tokens", err)
	}
	select {
	case <-w.ready:
		return w, nil
	case <-ctx.Done():
		_ = w.Close()
		return nil, f.s.unavailable("watch tokens", ctx.Err())
	}
}

// Close stops the watch; fn is not called once it has returned.
func (w *tokenWatch) Close() error {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	f := w.f
	f.mu.Lock()
	list := f.watches[w.channel]
	for i, o := range list {
		if o == w {
			list = append(list[:i:i], list[i+1:]...)
			break
		}
	}
	last := len(list) == 0
	if last {
		delete(f.watches, w.channel)
	} else {
		f.watches[w.channel] = list
	}
	f.mu.Unlock()
	if last {
		ctx, cancel := context.WithTimeout(f.ctx, unsubscribeTimeout)
		defer cancel()
		_ = f.ps.Unsubscribe(ctx, w.channel)
	}
	return nil
}

// deliver calls w's fn with st unless w is closed.
func (w *tokenWatch) deliver(st leasestore.TokenState) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.closed {
		st.Job = w.job
		w.fn(st)
	}
}

// run receives until the feed is closed. A failed receive means the
// connection was lost with whatever was published meanwhile: every watch
// is told so at once, and reads its state again once go-redis has
// re-subscribed.
func (f *tokenFeed) run() {
	defer close(f.done)
	for {
		msg, err := f.ps.Receive(f.ctx)
		if f.ctx.Err() != nil {
			return
		}
		if err != nil {
			f.lost()
			select {
			case <-time.After(feedRetry):
			case <-f.ctx.Done():
				return
			}
			continue
		}
		switch m := msg.(type) {
		case *redis.Subscription:
			if m.Kind == "subscribe" {
				f.subscribed(m.Channel)
			}
		case *redis.Message:
			f.message(m)
		}
	}
}

// lost tells every watch that changes may have been missed.
func (f *tokenFeed) lost() {
	for _, w := range f.all(func(w *tokenWatch) bool { w.synced = false; return true }) {
		w.deliver(leasestore.TokenState{Lost: true})
	}
}

// all returns the watches for which keep returns true, calling it under
// f.mu.
func (f *tokenFeed) all(keep func(*tokenWatch) bool) []*tokenWatch {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []*tokenWatch
	for _, list := range f.watches {
		for _, w := range list {
			if keep(w) {
				out = append(out, w)
			}
		}
	}
	return out
}

// subscribed reads the state of the channel's watches that have none since
// they started or were lost: from now on, every change reaches them.
func (f *tokenFeed) subscribed(channel string) {
	f.mu.Lock()
	var pending []*tokenWatch
	for _, w := range f.watches[channel] {
		if !w.synced {
			pending = append(pending, w)
		}
	}
	f.mu.Unlock()
	if len(pending) == 0 {
		return
	}
	st, err := f.read(pending[0].job)
	if err != nil {
		return
	}
	for _, w := range pending {
		w.deliver(st)
	}
	f.mu.Lock()
	for _, w := range pending {
		w.synced = true
		select {
		case <-w.ready:
		default:
			close(w.ready)
		}
	}
	f.mu.Unlock()
}

// read reads job's state from the store.
func (f *tokenFeed) read(job string) (leasestore.TokenState, error) {
	ctx, cancel := context.WithTimeout(f.ctx, feedReadTimeout)
	defer cancel()
	v, err := f.s.run(ctx, "watch tokens", scriptCheckToken, f.s.jobKeys(job), f.s.jobPrefix(job), job)
	if err != nil {
		return leasestore.TokenState{}, err
	}
	r := &reply{op: "watch tokens", v: v}
	st := leasestore.TokenState{Token: r.int(0), Live: r.int(1) == 1, Read: true}
	return st, r.err
}

// message handles one published message: a heartbeat marker, or a change
// of a watched job.
func (f *tokenFeed) message(m *redis.Message) {
	f.mu.Lock()
	if _, ok := f.shards[m.Channel]; ok {
		if b := f.beats[m.Payload]; b != nil && b.left[m.Channel] {
			delete(b.left, m.Channel)
			if len(b.left) == 0 {
				close(b.done)
			}
		}
		f.mu.Unlock()
		return
	}
	var synced []*tokenWatch
	for _, w := range f.watches[m.Channel] {
		if w.synced {
			synced = append(synced, w)
		}
	}
	f.mu.Unlock()
	if len(synced) == 0 || m.Payload == unquarantinePayload {
		return
	}
	st, ok := parseChange(m.Payload)
	if !ok {
		// A leasectl older than the feed publishes an empty payload on a
		// release: something changed, and only a read says what.
		var err error
		if st, err = f.read(synced[0].job); err != nil {
			f.mu.Lock()
			for _, w := range synced {
				w.synced = false
			}
			f.mu.Unlock()
			st = leasestore.TokenState{Lost: true}
		}
	}
	for _, w := range synced {
		w.deliver(st)
	}
}

// parseChange parses a grant ('g' and the token) or an end ('e' and the
// token).
func parseChange(payload string) (leasestore.TokenState, bool) {
	live := strings.HasPrefix(payload, grantPrefix)
	if !live && !strings.HasPrefix(payload, endPrefix) {
		return leasestore.TokenState{}, false
	}
	token, err := strconv.ParseInt(payload[1:], 10, 64)
	if err != nil {
		return leasestore.TokenState{}, false
	}
	return leasestore.TokenState{Token: token, Live: live}, true
}

// sync sends one heartbeat and waits for its markers; see SyncTokens.
func (f *tokenFeed) sync(ctx context.Context) error {
	f.mu.Lock()
	var shards []int
	b := &beat{left: map[string]bool{}, done: make(chan struct{})}
	watched := map[int]bool{}
	var resubscribe []string
	for channel, list := range f.watches {
		for _, w := range list {
			watched[shardOf(w.job)] = true
			if !w.synced {
				resubscribe = append(resubscribe, channel)
			}
		}
	}
	for hb, shard := range f.shards {
		if watched[shard] {
			shards = append(shards, shard)
			b.left[hb] = true
			if len(resubscribe) > 0 {
				resubscribe = append(resubscribe, hb)
			}
		}
	}
	f.seq++
	marker := f.id + "-" + strconv.FormatUint(f.seq, 10)
	if len(shards) > 0 {
		f.beats[marker] = b
	}
	f.mu.Unlock()
	if len(shards) == 0 {
		return nil
	}
	defer func() {
		f.mu.Lock()
		delete(f.beats, marker)
		f.mu.Unlock()
	}()
	if len(resubscribe) > 0 {
		// Watches lost without the connection being re-established (a
		// subscription refused, a failed read) try again, with the
		// heartbeat channels, which may have been refused too. A marker
		// that overtakes its channel's SUBSCRIBE is lost: this heartbeat
		// fails, the next one succeeds.
		if err := f.ps.Subscribe(ctx, resubscribe...); err != nil {
			return f.s.unavailable("sync tokens", err)
		}
	}
	if _, err := f.s.runShards(ctx, "sync tokens", scriptSync, shards, marker); err != nil {
		return err
	}
	select {
	case <-b.done:
	case <-ctx.Done():
		return f.s.unavailable("sync tokens", fmt.Errorf("heartbeat not received: %w", ctx.Err()))
	}
	if n := len(f.all(func(w *tokenWatch) bool { return !w.synced })); n > 0 {
		return f.s.unavailable("sync tokens", fmt.Errorf("%d watches lost their subscription and have not read their state again", n))
	}
	return nil
}

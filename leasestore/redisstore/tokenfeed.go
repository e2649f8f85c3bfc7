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
	// leftPayload wakes the waiters when one left the queue while a slot
	// is free (lua/leave.lua): no change of the job's tokens.
	leftPayload = "w"
)

const (
	// feedReadTimeout bounds one read of a watched job's state, after its
	// channel was subscribed again or carried an empty payload. A read that
	// fails leaves the watch lost (its checker asks the store) until
	// SyncTokens subscribes again.
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

// StartTokens opens the Store's one pub/sub connection for all its token
// watches, and a goroutine that receives on it; see leasestore.Driver. The
// heartbeat (Barrier) publishes a marker on the heartbeat channel of every
// shard with a watched job, from the server that owns the shard
// (lua/sync.lua), and returns once every marker came back: notifications
// travel the same way, so all those published before have arrived.
func (s *Store) StartTokens(_ context.Context, hub *leasestore.TokenHub) (leasestore.TokenSource, error) {
	s.feedMu.Lock()
	defer s.feedMu.Unlock()
	if s.feed != nil {
		return nil, leasestore.ErrFeedStarted
	}
	id := make([]byte, 8)
	_, _ = rand.Read(id)
	ctx, cancel := context.WithCancel(context.Background())
	f := &tokenFeed{
		s: s, hub: hub, ps: s.rdb.Subscribe(ctx), id: hex.EncodeToString(id), ctx: ctx, cancel: cancel,
		done: make(chan struct{}), jobs: map[string]string{}, waiting: map[string][]chan struct{}{},
		beats: map[string]*beat{}, shards: map[string]int{},
	}
	s.feed = f
	go f.run()
	return f, nil
}

// closeFeed stops the Store's feed, if it was started.
func (s *Store) closeFeed() {
	s.feedMu.Lock()
	f := s.feed
	s.feedMu.Unlock()
	if f != nil {
		f.cancel()
		_ = f.ps.Close()
		<-f.done
	}
}

// tokenFeed is the Store's side of its token feed (leasestore.TokenSource): one
// pub/sub connection, subscribed to the watched jobs' notification channels
// and their shards' heartbeat channels, and one goroutine (run) that
// receives on it and hands the changes to the hub.
type tokenFeed struct {
	s      *Store
	hub    *leasestore.TokenHub
	ps     *redis.PubSub
	id     string // makes this feed's heartbeat markers unique
	ctx    context.Context
	cancel context.CancelFunc
	done   chan struct{} // closed when run returns

	mu      sync.Mutex
	jobs    map[string]string          // notification channel -> job, of the jobs followed
	waiting map[string][]chan struct{} // Follows waiting for their channel's SUBSCRIBE, by channel
	shards  map[string]int             // heartbeat channel -> shard, of every shard ever followed
	beats   map[string]*beat           // pending heartbeats by marker
	seq     uint64
}

// beat is one heartbeat waiting for its marker on every shard it was sent to.
type beat struct {
	left map[string]bool // heartbeat channels whose marker has not come back
	done chan struct{}
}

// Follow subscribes to job's channel and its shard's heartbeat channel,
// and returns once Redis confirmed the job's.
func (f *tokenFeed) Follow(ctx context.Context, job string) error {
	shard := shardOf(job)
	channel, hb := f.s.channel(job), f.s.heartbeatChannel(shard)
	confirmed := make(chan struct{})
	f.mu.Lock()
	f.jobs[channel] = job
	f.shards[hb] = shard
	f.waiting[channel] = append(f.waiting[channel], confirmed)
	f.mu.Unlock()
	if err := f.ps.Subscribe(ctx, hb, channel); err != nil {
		return f.s.unavailable("watch tokens", err)
	}
	select {
	case <-confirmed:
		return nil
	case <-ctx.Done():
		return f.s.unavailable("watch tokens", ctx.Err())
	}
}

// Unfollow unsubscribes from job's channel; if that fails, the channel's
// messages are received and dropped.
func (f *tokenFeed) Unfollow(job string) {
	channel := f.s.channel(job)
	f.mu.Lock()
	delete(f.jobs, channel)
	delete(f.waiting, channel)
	f.mu.Unlock()
	ctx, cancel := context.WithTimeout(f.ctx, unsubscribeTimeout)
	defer cancel()
	_ = f.ps.Unsubscribe(ctx, channel)
}

// Read reads job's state from the store.
func (f *tokenFeed) Read(ctx context.Context, job string) (leasestore.TokenState, error) {
	v, err := f.s.run(ctx, "watch tokens", scriptCheckToken, f.s.jobKeys(job), f.s.jobPrefix(job), job, 0)
	if err != nil {
		return leasestore.TokenState{}, err
	}
	r := &reply{op: "watch tokens", v: v}
	st := leasestore.TokenState{Job: job, Token: r.int(0), Live: r.int(1) == 1, Read: true}
	return st, r.err
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
			f.hub.Lost()
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

// subscribed handles Redis's confirmation of a channel's SUBSCRIBE: the
// Follows waiting for it return, and a job whose watches were lost reads
// its state again (go-redis re-subscribed after a lost connection, or
// SyncTokens did): from now on, every change reaches the hub.
func (f *tokenFeed) subscribed(channel string) {
	f.mu.Lock()
	job, followed := f.jobs[channel]
	waiting := f.waiting[channel]
	delete(f.waiting, channel)
	f.mu.Unlock()
	for _, c := range waiting {
		close(c)
	}
	if followed {
		f.reread(true, job)
	}
}

// reread has the hub read job, bounded by feedReadTimeout.
func (f *tokenFeed) reread(lostOnly bool, job string) {
	ctx, cancel := context.WithTimeout(f.ctx, feedReadTimeout)
	defer cancel()
	_ = f.hub.Reread(ctx, lostOnly, job)
}

// message handles one published message: a heartbeat marker, or a change
// of a followed job.
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
	job, followed := f.jobs[m.Channel]
	f.mu.Unlock()
	if !followed || m.Payload == unquarantinePayload || m.Payload == leftPayload {
		return
	}
	if st, ok := parseChange(job, m.Payload); ok {
		f.hub.Publish(st)
		return
	}
	// A leasectl older than the feed publishes an empty payload on a
	// release: something changed, and only a read says what.
	f.reread(false, job)
}

// parseChange parses a change of job: a grant ('g' and the token) or an
// end ('e' and the token).
func parseChange(job, payload string) (leasestore.TokenState, bool) {
	live := strings.HasPrefix(payload, grantPrefix)
	if !live && !strings.HasPrefix(payload, endPrefix) {
		return leasestore.TokenState{}, false
	}
	token, err := strconv.ParseInt(payload[1:], 10, 64)
	if err != nil {
		return leasestore.TokenState{}, false
	}
	return leasestore.TokenState{Job: job, Token: token, Live: live}, true
}

// Barrier sends one heartbeat and waits for its markers; see SyncTokens.
// Channels whose watches were lost without the connection being
// re-established (a subscription refused, a failed read) are subscribed
// again first, with the heartbeat channels, which may have been refused
// too: their confirmation, which comes before the markers, reads them
// again.
func (f *tokenFeed) Barrier(ctx context.Context) error {
	lost := f.hub.LostJobs()
	f.mu.Lock()
	b := &beat{left: map[string]bool{}, done: make(chan struct{})}
	watched := map[int]bool{}
	for _, job := range f.jobs {
		watched[shardOf(job)] = true
	}
	var shards []int
	var resubscribe []string
	for _, job := range lost {
		resubscribe = append(resubscribe, f.s.channel(job))
	}
	for hb, shard := range f.shards {
		if watched[shard] {
			shards = append(shards, shard)
			b.left[hb] = true
			if len(lost) > 0 {
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
		// A marker that overtakes its channel's SUBSCRIBE is lost: this
		// heartbeat fails, the next one succeeds.
		if err := f.ps.Subscribe(ctx, resubscribe...); err != nil {
			return f.s.unavailable("sync tokens", err)
		}
	}
	if _, err := f.s.runShards(ctx, "sync tokens", scriptSync, shards, marker); err != nil {
		return err
	}
	select {
	case <-b.done:
		return nil
	case <-ctx.Done():
		return f.s.unavailable("sync tokens", fmt.Errorf("heartbeat not received: %w", ctx.Err()))
	}
}

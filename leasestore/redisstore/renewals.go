package redisstore

import (
	"context"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// renewPipelines is how many pipelines of renewals a Store sends at once.
// A renewal that finds them all in flight waits for the next one, which
// takes every renewal queued by then: the fewer in flight, the larger the
// pipelines and the fewer system calls per renewal (in the Store and in
// Redis), but the longer a renewal may wait behind one round trip. Two
// keep one pipeline filling while the other is answered; a lone renewal
// (a supervisor's) never waits.
const renewPipelines = 2

// renewals merges the renewals a Store is asked for at once (a registry's
// heartbeats) into Redis pipelines. Each renewal is still its own EVALSHA
// of the renew script on its own job's keys, with its own token check and
// its own answer; only the round trip is shared. On a cluster, go-redis
// splits a pipeline by node, one round trip per node.
type renewals struct {
	mu      sync.Mutex
	queue   []*renewal
	sending int // pipelines in flight, at most renewPipelines
}

// renewal is one queued renewal: its call's context, the renew script's
// keys and arguments, and, once done is closed, its reply.
type renewal struct {
	ctx  context.Context
	keys []string
	args []any
	v    any
	err  error
	done chan struct{}
}

// renew runs the renew script with keys and args in the next pipeline and
// returns its reply. ctx bounds the wait: a renewal whose ctx ends while
// it is queued is dropped from the pipeline, one already sent is answered
// to nobody.
func (s *Store) renew(ctx context.Context, keys []string, args []any) (any, error) {
	r := &renewal{ctx: ctx, keys: keys, args: args, done: make(chan struct{})}
	b := &s.renewals
	b.mu.Lock()
	b.queue = append(b.queue, r)
	if b.sending < renewPipelines {
		b.sending++
		go s.sendRenewals()
	}
	b.mu.Unlock()
	select {
	case <-r.done:
		return r.v, r.err
	case <-ctx.Done():
		return nil, s.unavailable("renew", ctx.Err())
	}
}

// sendRenewals sends the queued renewals in one pipeline, then those
// queued meanwhile, until none is left.
func (s *Store) sendRenewals() {
	b := &s.renewals
	for {
		b.mu.Lock()
		batch := b.queue
		b.queue = nil
		if len(batch) == 0 {
			b.sending--
			b.mu.Unlock()
			return
		}
		b.mu.Unlock()
		s.pipelineRenewals(batch)
	}
}

// pipelineRenewals sends batch's renewals whose callers still wait in one
// pipeline, bounded by the latest of their deadlines, and answers each. A
// renewal whose server lost its script cache is run again on its own,
// which loads the script.
func (s *Store) pipelineRenewals(batch []*renewal) {
	live := batch[:0]
	var latest time.Time
	unbounded := false
	for _, r := range batch {
		if r.ctx.Err() != nil {
			continue
		}
		live = append(live, r)
		if d, ok := r.ctx.Deadline(); !ok {
			unbounded = true
		} else if d.After(latest) {
			latest = d
		}
	}
	if len(live) == 0 {
		return
	}
	// Not cancelled with any one renewal's call: the others still wait.
	base := context.WithoutCancel(live[0].ctx)
	var ctx context.Context
	var cancel context.CancelFunc
	if unbounded {
		ctx, cancel = context.WithCancel(base)
	} else {
		ctx, cancel = context.WithDeadline(base, latest)
	}
	defer cancel()
	sc := scriptRenew()
	cmds := make([]*redis.Cmd, len(live))
	// A failed round trip sets its error on every command: each renewal
	// reads its own.
	_, _ = s.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, r := range live {
			cmds[i] = sc.EvalSha(ctx, p, r.keys, r.args...)
		}
		return nil
	})
	for i, r := range live {
		r.v, r.err = cmds[i].Result()
		if redis.HasErrorPrefix(r.err, "NOSCRIPT") {
			r.v, r.err = s.run(r.ctx, "renew", scriptRenew, r.keys, r.args...)
		} else if r.err != nil {
			r.err = s.unavailable("renew", r.err)
		}
		close(r.done)
	}
}

package registry

import (
	"container/list"
	"context"
	"crypto/sha256"
	"sync"
	"time"

	"github.com/leasectl/leasectl/registry/api"
)

// Bounds of the remembered answers. An answer is remembered for
// idempotencyTTL: far longer than any client retries a request (a release
// is retried for 5 s), short enough that the memory stays small. Answers
// larger than idempotencyMaxBody (a scan that counted thousands of crashes)
// are not remembered: a retry does the operation again, as it would
// without a key. Past idempotencyMaxBytes in all, or idempotencyMaxEntries
// keys, the oldest are dropped.
const (
	idempotencyTTL        = 10 * time.Minute
	idempotencyMaxBody    = 256 << 10
	idempotencyMaxBytes   = 32 << 20
	idempotencyMaxEntries = 100_000
	// maxIdempotencyKeyLen bounds a key: a UUID or a hash fits.
	maxIdempotencyKeyLen = 128
)

// idempotency remembers the answers to requests that carried an
// Idempotency-Key, per bearer token, so that a retried request gets the
// first answer instead of acting twice (a second release of a run would
// find its lease gone and say so).
type idempotency struct {
	mu    sync.Mutex
	now   func() time.Time
	m     map[idemKey]*idemEntry
	order *list.List // of idemKey, oldest first
	bytes int
}

type idemKey struct {
	token [sha256.Size]byte
	key   string
}

type idemEntry struct {
	route   string
	body    [sha256.Size]byte // the request's
	done    chan struct{}     // closed when the first request is answered
	status  int               // 0: answered, but not remembered
	answer  []byte
	expires time.Time
	elem    *list.Element
}

func newIdempotency(now func() time.Time) *idempotency {
	return &idempotency{now: now, m: map[idemKey]*idemEntry{}, order: list.New()}
}

// begin looks up key for a request to route with body's digest. It returns
// the entry the caller now answers (owner), or the remembered status and
// answer of an earlier request with the same key, waiting for that request
// to be answered first. A key seen with another route or body is an
// idempotency_key_reused error.
func (c *idempotency) begin(ctx context.Context, k idemKey, route string, body [sha256.Size]byte) (owner *idemEntry, status int, answer []byte, err error) {
	for {
		c.mu.Lock()
		c.expire()
		e, ok := c.m[k]
		if !ok {
			for c.order.Len() >= idempotencyMaxEntries {
				c.remove(c.order.Front().Value.(idemKey))
			}
			e = &idemEntry{route: route, body: body, done: make(chan struct{}), expires: c.now().Add(idempotencyTTL)}
			e.elem = c.order.PushBack(k)
			c.m[k] = e
			c.mu.Unlock()
			return e, 0, nil, nil
		}
		c.mu.Unlock()
		if e.route != route || e.body != body {
			return nil, 0, nil, api.Errorf(api.CodeIdempotencyKeyReused,
				"Idempotency-Key %q came before with another request; use a new key for a new request", k.key)
		}
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, 0, nil, ctx.Err()
		}
		if e.status != 0 {
			return nil, e.status, e.answer, nil
		}
		// Answered but not remembered (the store failed): try again,
		// perhaps as the owner.
	}
}

// finish records owner's answer and wakes the requests waiting for it. An
// answer is remembered when remember is set and it is small enough;
// otherwise the key is forgotten and a retry acts again.
func (c *idempotency) finish(owner *idemEntry, k idemKey, status int, answer []byte, remember bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if remember && len(answer) <= idempotencyMaxBody {
		owner.status, owner.answer = status, answer
		c.bytes += len(answer)
		for c.bytes > idempotencyMaxBytes && c.order.Len() > 1 {
			c.remove(c.order.Front().Value.(idemKey))
		}
	} else if c.m[k] == owner {
		c.remove(k)
	}
	close(owner.done)
}

// expire drops the entries whose time is up.
func (c *idempotency) expire() {
	now := c.now()
	for front := c.order.Front(); front != nil; front = c.order.Front() {
		k := front.Value.(idemKey)
		if e := c.m[k]; e != nil && now.Before(e.expires) {
			return
		}
		c.remove(k)
	}
}

func (c *idempotency) remove(k idemKey) {
	e, ok := c.m[k]
	if !ok {
		return
	}
	c.order.Remove(e.elem)
	c.bytes -= len(e.answer)
	delete(c.m, k)
}

package registry

import (
	"sync"
	"time"
)

// Failed authentications one client address may make: a burst, then this
// many a second. A guess of a token costs the guesser a request; at this
// rate no 16-character token falls, while a client with a mistyped token
// still gets its 401 at once.
const (
	authFailureRate  = 5
	authFailureBurst = 20
)

// limiterIdle is how long a client address's buckets are kept after its
// last request; a full bucket that old is the same as a new one.
const limiterIdle = time.Minute

// maxLimited bounds the client addresses tracked at once, so that requests
// from very many addresses (an IPv6 range) cannot grow the registry's
// memory without bound: past it, the idle ones are dropped at once, and an
// address that still finds no room is let through untracked.
const maxLimited = 1 << 16

// limiter is a token bucket per client address: one for requests (rate a
// second, bursts of 2×rate; rate 0: no limit) and one for failed
// authentications.
type limiter struct {
	mu        sync.Mutex
	rate      float64
	now       func() time.Time
	buckets   map[string]*bucket
	lastSweep time.Time
}

type bucket struct {
	requests, failures float64
	last               time.Time
}

func newLimiter(rate float64, now func() time.Time) *limiter {
	return &limiter{rate: rate, now: now, buckets: map[string]*bucket{}, lastSweep: now()}
}

// get returns addr's buckets, refilled to now.
func (l *limiter) get(addr string) *bucket {
	now := l.now()
	b, ok := l.buckets[addr]
	if crowded := len(l.buckets) >= maxLimited; !ok && (crowded || now.Sub(l.lastSweep) > limiterIdle) {
		for a, b := range l.buckets {
			if now.Sub(b.last) > limiterIdle || crowded && b.full(l.rate) {
				delete(l.buckets, a)
			}
		}
		l.lastSweep = now
	}
	if !ok {
		b = &bucket{requests: 2 * l.rate, failures: authFailureBurst, last: now}
		if len(l.buckets) < maxLimited {
			l.buckets[addr] = b
		}
		return b
	}
	dt := now.Sub(b.last).Seconds()
	b.requests = min(2*l.rate, b.requests+dt*l.rate)
	b.failures = min(authFailureBurst, b.failures+dt*authFailureRate)
	b.last = now
	return b
}

// full reports whether b was full at its last request: dropping it loses
// nothing.
func (b *bucket) full(rate float64) bool {
	return b.requests >= 2*rate-1 && b.failures >= authFailureBurst-1
}

// allow takes one request from addr's bucket and reports whether there
// was one.
func (l *limiter) allow(addr string) bool {
	if l.rate <= 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.get(addr)
	if b.requests < 1 {
		return false
	}
	b.requests--
	return true
}

// allowFailure takes one failed authentication from addr's bucket and
// reports whether there was one.
func (l *limiter) allowFailure(addr string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.get(addr)
	if b.failures < 1 {
		return false
	}
	b.failures--
	return true
}

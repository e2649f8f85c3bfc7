package supervise

import (
	"math/rand/v2"
	"time"
)

// minRetry and maxRetry bound how quickly a failed store call is retried:
// quick enough to get several tries into the safety window, slow enough
// not to hammer a store that is struggling.
const (
	minRetry = 10 * time.Millisecond
	maxRetry = time.Second
)

// retryDelay is the longest wait before retrying a failed store call; the
// wait itself is jittered below it (see retryAfter).
func retryDelay(heartbeat time.Duration) time.Duration {
	return min(max(heartbeat/5, minRetry), maxRetry)
}

// retryAfter is how long to wait before retrying a failed store call: the
// retry delay, jittered. A store that failed over fails every supervisor at
// the same instant; without jitter the whole fleet would retry in lockstep.
// The wait is never shorter than half the delay, so a struggling store is
// not hammered, and never longer than the delay, so a renewal gets as many
// tries into the safety window as without jitter.
func (s *Supervisor) retryAfter(heartbeat time.Duration) time.Duration {
	jitter := s.Jitter
	if jitter == nil {
		jitter = equalJitter
	}
	return jitter(retryDelay(heartbeat))
}

// equalJitter returns a duration drawn uniformly from [d/2, d], d > 0: the
// "equal jitter" of exponential back-off, which spreads retries without
// ever retrying at once.
func equalJitter(d time.Duration) time.Duration {
	return d - rand.N(d/2+1)
}

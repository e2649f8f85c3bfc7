package leasestore

import (
	"fmt"
	"time"
)

// Limits are the lease TTLs and the slots a store honours.
type Limits struct {
	// MinTTL and MaxTTL bound the lease TTLs the store honours (etcd: whole
	// seconds from its minimum lease TTL up); zero: no bound. Callers check
	// a run's TTL against them before any I/O, so that a TTL the store
	// would round or refuse is a usage error naming the limit.
	MinTTL, MaxTTL time.Duration
	// MaxSlots is the most slots the store grants a job
	// (AcquireRequest.Slots): MaxSlots, or fewer on a store whose record
	// of a job could not hold as many (etcd); zero: one, as for a store
	// without slots.
	MaxSlots int
}

// Ranged reports whether the store bounds the lease TTLs it honours.
func (l Limits) Ranged() bool { return l.MinTTL > 0 || l.MaxTTL > 0 }

// Slots is the most slots the store grants a job: MaxSlots, and one when
// MaxSlots is zero.
func (l Limits) Slots() int { return max(l.MaxSlots, 1) }

// Check refuses a lease TTL and a number of slots (AcquireRequest's: 0 or
// 1 for one) outside the limits, with a *LimitError that says which limit
// for each caller to word in its own terms (the portable Store's
// *RequestError, run's usage error, the registry's 400); nil when both are
// within them. It does no I/O.
func (l Limits) Check(ttl time.Duration, slots int) error {
	var limit Limit
	switch {
	case ttl <= 0:
		limit = TTLNotPositive
	case l.MinTTL > 0 && ttl < l.MinTTL:
		limit = TTLBelowMin
	case l.MaxTTL > 0 && ttl > l.MaxTTL:
		limit = TTLAboveMax
	case slots < 0:
		limit = SlotsNegative
	case slots > l.Slots():
		limit = SlotsAboveMax
	default:
		return nil
	}
	return &LimitError{Limit: limit, TTL: ttl, Slots: slots, Limits: l}
}

// Limit names the limit a request is outside of (LimitError).
type Limit int

// The limits Limits.Check refuses a request for.
const (
	// TTLNotPositive: the TTL is zero or negative.
	TTLNotPositive Limit = iota + 1
	// TTLBelowMin: the TTL is below Limits.MinTTL.
	TTLBelowMin
	// TTLAboveMax: the TTL is above Limits.MaxTTL.
	TTLAboveMax
	// SlotsNegative: the number of slots is negative.
	SlotsNegative
	// SlotsAboveMax: more slots than Limits.Slots.
	SlotsAboveMax
)

// LimitError is a request outside a store's Limits: which limit, and the
// request's values and the limits, for the caller's own message.
type LimitError struct {
	Limit  Limit
	TTL    time.Duration
	Slots  int
	Limits Limits
}

// TTLLimit reports whether the TTL is what is outside the limits (the
// slots otherwise).
func (e *LimitError) TTLLimit() bool { return e.Limit <= TTLAboveMax }

// Error says which limit the request is outside of, in the portable
// Store's words.
func (e *LimitError) Error() string {
	switch e.Limit {
	case TTLNotPositive:
		return fmt.Sprintf("%s is not positive", e.TTL)
	case TTLBelowMin:
		return fmt.Sprintf("%s is below the store's minimum lease TTL %s", e.TTL, e.Limits.MinTTL)
	case TTLAboveMax:
		return fmt.Sprintf("%s is above the store's maximum lease TTL %s", e.TTL, e.Limits.MaxTTL)
	}
	return fmt.Sprintf("%d is not 0 to the %d this store runs per job", e.Slots, e.Limits.Slots())
}

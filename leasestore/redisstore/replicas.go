package redisstore

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
)

// Grants that survive a failover. Redis replicates asynchronously: a grant
// (or a renewal) acknowledged by a primary that dies before its replicas
// have it is lost, and the promoted replica may grant the job to a second
// worker while the first child runs. With min_replicas N, every grant and
// every renewal is followed by WAIT N on the same connection (WAIT counts
// the writes of its own connection, and cannot run inside a script), and
// only counts once N replicas acknowledged it.

// defaultWaitTimeout bounds WAIT when the caller's ctx has no deadline.
// Callers that matter (the supervisor) always set one: the time left in the
// safety window.
const defaultWaitTimeout = time.Second

// waitMargin is the least time WAIT's timeout leaves before the caller's
// deadline: Redis checks blocked clients' timeouts every 1/hz seconds
// (100 ms by default), so WAIT answers up to that much after its timeout.
const waitMargin = 150 * time.Millisecond

// ReplicationError means a write reached fewer replicas than min_replicas
// asks for before its deadline: it may be lost in a failover, so it does
// not count.
type ReplicationError struct {
	Op      string
	Acked   int64
	Want    int
	Timeout time.Duration
}

// Error says how many replicas acknowledged the write and how many it needs.
func (e *ReplicationError) Error() string {
	return fmt.Sprintf("the %s reached %d of %d replica(s) within %s (min_replicas=%d): it could be lost in a failover",
		e.Op, e.Acked, e.Want, e.Timeout.Round(time.Millisecond), e.Want)
}

// runReplicated runs script like run and, with min_replicas set, WAITs for
// that many replicas on the same connection, copied to a replacement of a
// silent primary (copies.go); it also returns how many copies went out.
// When fewer replicas acknowledged in time, it returns the script's reply
// with an *UnavailableError wrapping a *ReplicationError: the caller
// decides what to undo.
func (s *Store) runReplicated(ctx context.Context, op string, script func() *redis.Script, keys []string, args []any) (any, int, error) {
	return s.copied(ctx, func(ctx context.Context, node *redis.Client) (any, error) {
		switch {
		case s.minReplicas > 0:
			return s.runWaited(ctx, op, script, keys, args, node)
		case node != nil:
			v, err := script().Run(ctx, node, keys, args...).Result()
			if err != nil {
				return nil, s.unavailable(op, err)
			}
			return v, nil
		}
		return s.run(ctx, op, script, keys, args...)
	})
}

// runWaited runs script on node (nil: the primary that holds keys) and
// WAITs for min_replicas replicas; see runReplicated.
func (s *Store) runWaited(ctx context.Context, op string, script func() *redis.Script, keys []string, args []any, node *redis.Client) (any, error) {
	if node == nil {
		var err error
		if node, err = s.nodeFor(ctx, keys[0]); err != nil {
			return nil, s.unavailable(op, err)
		}
	}
	timeout := defaultWaitTimeout
	if d, ok := ctx.Deadline(); ok {
		// WAIT answers at its timeout with the replicas it has, checked
		// by the server every 100 ms (hz 10): leave that, or a quarter of
		// the time if more, for the answer to arrive before ctx ends.
		left := time.Until(d)
		timeout = max(left-max(left/4, waitMargin), time.Millisecond)
	}
	// WAIT counts the writes of its own connection: hold one for both.
	conn := node.Conn()
	defer conn.Close()
	v, err := script().Run(ctx, conn, keys, args...).Result()
	if err != nil {
		return nil, s.unavailable(op, err)
	}
	acked, err := conn.Wait(ctx, s.minReplicas, timeout).Result()
	if err != nil {
		return v, s.unavailable(op, err)
	}
	if acked < int64(s.minReplicas) {
		return v, &leasestore.UnavailableError{Op: op, Err: &ReplicationError{Op: op, Acked: acked, Want: s.minReplicas, Timeout: timeout}}
	}
	return v, nil
}

// nodeFor is the client of the primary that holds key: the Store's own
// client, or on a cluster the client of the node that owns key's slot.
func (s *Store) nodeFor(ctx context.Context, key string) (*redis.Client, error) {
	switch c := s.rdb.(type) {
	case *redis.Client:
		return c, nil
	case *redis.ClusterClient:
		return c.MasterForKey(ctx, key)
	default:
		return nil, fmt.Errorf("min_replicas needs a single-node, Sentinel or Cluster client, not %T", s.rdb)
	}
}

package redisstore

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// pipelineSizes is a go-redis hook that records the largest pipeline sent.
type pipelineSizes struct{ largest atomic.Int64 }

func (h *pipelineSizes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (h *pipelineSizes) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }

func (h *pipelineSizes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		for n := int64(len(cmds)); ; {
			old := h.largest.Load()
			if n <= old || h.largest.CompareAndSwap(old, n) {
				break
			}
		}
		return next(ctx, cmds)
	}
}

// Renewals asked for at once share pipelines, and each keeps its own
// answer: in the same pipelines, a renewal with its run's token succeeds
// and one with a stale token is refused.
func TestRedisConcurrentRenewalsShareRoundTripsNotAnswers(t *testing.T) {
	const jobs = 100
	s := openRedis(t, testRedis.Get(t).URL, freshNamespace())
	sizes := &pipelineSizes{}
	s.rdb.AddHook(sizes)
	leases := make([]*leasestore.Lease, jobs)
	for i := range jobs {
		leases[i] = storetest.Acquire(t, s, storetest.Request(fmt.Sprintf("job-%d", i), "w1", storetest.LongTTL))
	}
	var wg sync.WaitGroup
	errs := make([]error, 2*jobs)
	for i := range 2 * jobs {
		l := *leases[i/2]
		if i%2 == 1 {
			l.Token-- // a run before this one
		}
		wg.Go(func() { errs[i] = s.Renew(redisCall(t, storetest.HangGuard), &l) })
	}
	wg.Wait()
	for i, err := range errs {
		if i%2 == 0 && err != nil {
			t.Errorf("job-%d, its run's token: %v", i/2, err)
		}
		if i%2 == 1 && !errors.Is(err, leasestore.ErrLeaseLost) {
			t.Errorf("job-%d, a stale token: got %v, want ErrLeaseLost", i/2, err)
		}
	}
	if n := sizes.largest.Load(); n < 2 {
		t.Errorf("the largest pipeline held %d renewals: %d renewals at once were never merged", n, 2*jobs)
	}
}

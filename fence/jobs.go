package fence

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// entry returns job's entry, making room for it when it is new, and with
// WriteThrough makes sure its watch is started.
func (c *Checker) entry(ctx context.Context, job string, now time.Time) (*entry, error) {
	if c.closed.Load() {
		return nil, ErrClosed
	}
	v, ok := c.jobs.Load(job)
	if !ok {
		var evicted []leasestore.TokenWatch
		c.mu.Lock()
		if c.closed.Load() {
			c.mu.Unlock()
			return nil, ErrClosed
		}
		if v, ok = c.jobs.Load(job); !ok {
			if c.njobs.Load() >= int64(c.maxJobs) {
				evicted = c.evict()
			}
			v = c.newEntry(job, now)
			c.jobs.Store(job, v)
			c.njobs.Add(1)
		}
		c.mu.Unlock()
		closeWatches(evicted)
	}
	e := v.(*entry)
	if c.pattern == WriteThrough && !e.watched.Load() {
		c.startWatch(ctx, e)
	}
	return e, nil
}

// evictShare is the share of the remembered jobs forgotten at once when a
// new one needs room: sorting them all for every new job would cost each
// new job a full sort.
const evictShare = 10

// evict forgets the least recently checked tenth of the jobs, except those
// with writes admitted or a watch starting, and returns their watches to
// close; c.mu is held.
func (c *Checker) evict() []leasestore.TokenWatch {
	type used struct {
		e  *entry
		at int64
	}
	var list []used
	c.jobs.Range(func(_, v any) bool {
		e := v.(*entry)
		list = append(list, used{e, e.lastUsed.Load()})
		return true
	})
	slices.SortFunc(list, func(a, b used) int { return cmp.Compare(a.at, b.at) })
	n := max(1, len(list)/evictShare)
	var watches []leasestore.TokenWatch
	for _, u := range list {
		if n == 0 {
			break
		}
		u.e.mu.Lock()
		busy := u.e.busy() || u.e.watching
		if !busy {
			u.e.evicted = true
			if u.e.watch != nil {
				watches = append(watches, u.e.watch)
				u.e.watch = nil
				u.e.watched.Store(false)
			}
		}
		u.e.mu.Unlock()
		if !busy {
			c.jobs.Delete(u.e.job)
			c.njobs.Add(-1)
			n--
		}
	}
	return watches
}

package etcdstore

import (
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore/storetest"
)

// TestEtcdRunWaitServesWaitersInArrivalOrder: four `leasectl run --wait`
// of the built binary, each started once the one before is in the job's
// queue, are served in that order as each holder ends, where they used to
// race on every release.
func TestEtcdRunWaitServesWaitersInArrivalOrder(t *testing.T) {
	c := testEtcd.Get(t)
	ns := freshNamespace()
	s := openEtcd(t, c.URL(), ns)
	holder := run(t, c.URL(), ns, "line")
	last := holder.token()
	var waiters []*proc
	for i := range 4 {
		waiters = append(waiters, run(t, c.URL(), ns, "line", "--wait"))
		for guard := time.Now().Add(storetest.HangGuard); len(storetest.Status(t, s, "line").Queue) != i+1; time.Sleep(10 * time.Millisecond) {
			if time.Now().After(guard) {
				t.Fatalf("waiter %d not in the queue after %s", i+1, storetest.HangGuard)
			}
		}
	}
	holder.stop()
	for i, w := range waiters {
		token := w.token()
		if token <= last {
			t.Errorf("waiter %d got token %d after %d: served out of arrival order", i+1, token, last)
		}
		last = token
		for _, later := range waiters[i+1:] {
			if line, ok := later.startedYet(); ok {
				t.Errorf("a later waiter started (%q) while waiter %d holds the job", line, i+1)
			}
		}
		w.stop()
	}
}

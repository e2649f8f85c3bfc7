package pgstore

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// TestScanCountsTheSlotsOfAJobInOrder has a scan count the crashes of two
// runs of one job at once, in the one statement of _count_crashes: as
// rules.Reap counts them, the first by slot is crash 1 and quarantines the
// job at its threshold of 1, the second is crash 2 and quarantines nothing
// more, and the history has their events in that order.
func TestScanCountsTheSlotsOfAJobInOrder(t *testing.T) {
	s := openPG(t, testPG.Get(t).URL, freshNamespace())
	var runs []*leasestore.Lease
	for _, w := range []string{"a", "b"} {
		req := storetest.Request("job", w, storetest.ShortTTL)
		req.Slots, req.MaxCrashes = 3, 1
		runs = append(runs, storetest.Acquire(t, s, req))
	}
	for guard := time.Now().Add(storetest.HangGuard); len(storetest.Status(t, s, "job").Holders) > 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatalf("the runs are still live %s after their grant, with a TTL of %s", storetest.HangGuard, storetest.ShortTTL)
		}
	}
	crashes, err := s.Scan(storetest.Ctx(t))
	if err != nil {
		t.Fatalf("Scan: %v", err)
	}
	var got []string
	for _, c := range crashes {
		got = append(got, fmt.Sprintf("%s: crash %d, quarantined %v", c.Holder, c.Crashes, c.Quarantined))
	}
	if want := []string{"a: crash 1, quarantined true", "b: crash 2, quarantined false"}; !slices.Equal(got, want) {
		t.Errorf("Scan counted %q, want %q", got, want)
	}
	st := storetest.Status(t, s, "job")
	var events []string
	for _, e := range st.History {
		events = append(events, fmt.Sprintf("%s %s", e.Kind, e.Worker))
	}
	want := []string{"acquired a", "acquired b", "crashed a", "quarantined a", "crashed b"}
	if q := st.Quarantine; q == nil || q.Crashes != 1 || q.LastHolder != "a" || st.Crashes != 2 || !slices.Equal(events, want) {
		t.Errorf("status: quarantine %+v, %d crashes, history %q; want quarantined at crash 1 of a, 2 crashes, history %q",
			st.Quarantine, st.Crashes, events, want)
	}
	if runs[0].Slot != 0 || runs[1].Slot != 1 {
		t.Errorf("the runs took slots %d and %d, want 0 and 1", runs[0].Slot, runs[1].Slot)
	}
}

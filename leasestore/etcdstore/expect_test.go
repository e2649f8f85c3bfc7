package etcdstore

import (
	"context"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// A due index key its record does not name (an earlier leasectl rewrote
// the record without its expectation, or the job has no record) is not an
// overdue job: Overdue skips it and deletes it, and still lists the job
// that is overdue.
func TestEtcdOverdueDropsDueKeysItsRecordDoesNotName(t *testing.T) {
	c := testEtcd.Get(t)
	s := openEtcd(t, c.URL(), freshNamespace())
	ctx := context.Background()
	note := leasestore.Note{By: "alice"}
	for _, job := range []string{"late", "rewritten"} {
		if err := s.Expect(ctx, job, &leasestore.Expectation{Every: time.Millisecond}, note); err != nil {
			t.Fatal(err)
		}
	}
	rewritten := storetest.Status(t, s, "rewritten")
	orphans := [][]byte{
		s.dueKey("gone", time.Now().Add(-time.Hour)),
		s.dueKey("rewritten", rewritten.Expect.Due(rewritten.LastSuccess)),
	}
	put := func(key []byte, value string) {
		t.Helper()
		if err := c.Members[0].Do(ctx, "/v3/kv/put", map[string]any{"key": key, "value": []byte(value)}, nil); err != nil {
			t.Fatal(err)
		}
	}
	put(orphans[0], `{"expect":{"Every":1000000}}`)
	put(s.key(kindJob, "rewritten"), `{"last_token":1}`) // as a leasectl that knows no expectation writes it
	time.Sleep(2 * time.Millisecond)                     // past the millisecond
	for range 2 {
		list, err := s.Overdue(ctx)
		if err != nil || len(list) != 1 || list[0].Job != "late" {
			t.Fatalf("Overdue() = %+v, %v; want late alone", list, err)
		}
	}
	for _, key := range orphans {
		var resp rangeResponse
		if err := s.c.call(ctx, "/v3/kv/range", &rangeRequest{Key: key}, &resp); err != nil || len(resp.KVs) != 0 {
			t.Errorf("due key %s is still there (%v)", key, err)
		}
	}
}

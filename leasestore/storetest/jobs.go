package storetest

import (
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// testJobs holds a store to Jobs (docs/semantics.md, Jobs): the jobs it
// knows, granted or quarantined, in byte order, filtered by prefix and cut
// at the limit; a job only asked about, or refused before any grant, is
// not one of them.
func testJobs(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	jobs := func(prefix string, limit int) []string {
		t.Helper()
		list, err := s.Jobs(Ctx(t), prefix, limit)
		if err != nil {
			t.Fatalf("Jobs(%q, %d): %v", prefix, limit, err)
		}
		return list
	}
	if list := jobs("", 0); len(list) != 0 {
		t.Errorf("Jobs of an empty store = %q, want none", list)
	}
	Release(t, s, Acquire(t, s, Request("etl:orders", "w1", LongTTL)), leasestore.ResultCompleted)
	Acquire(t, s, Request("etl/b", "w2", LongTTL))
	Acquire(t, s, Request("etm", "w4", LongTTL))
	if err := s.Quarantine(Ctx(t), "billing=v2", leasestore.Note{By: "alice", Reason: "bad rows"}); err != nil {
		t.Fatal(err)
	}
	Status(t, s, "never-run")
	late := Request("too-late", "w3", LongTTL)
	late.Deadline = time.Now().Add(-time.Hour)
	if _, err := s.Acquire(Ctx(t), late); err == nil {
		t.Fatal("an acquire past its deadline was granted")
	}
	if list, want := jobs("", 0), []string{"billing=v2", "etl/b", "etl:orders", "etm"}; !slices.Equal(list, want) {
		t.Errorf("Jobs(\"\", 0) = %q, want %q: granted and quarantined jobs, byte order", list, want)
	}
	if list, want := jobs("etl", 0), []string{"etl/b", "etl:orders"}; !slices.Equal(list, want) {
		t.Errorf("Jobs(\"etl\", 0) = %q, want %q", list, want)
	}
	if list, want := jobs("", 2), []string{"billing=v2", "etl/b"}; !slices.Equal(list, want) {
		t.Errorf("Jobs(\"\", 2) = %q, want %q: the first two", list, want)
	}
	if list := jobs("etl:orders-", 0); len(list) != 0 {
		t.Errorf("Jobs(\"etl:orders-\", 0) = %q, want none", list)
	}
}

package filestore

import (
	"os"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/leasestore/storetest"
)

// TestEmbeddedOneRunKeepsTheOlderShape: a job's one run in its first slot
// is written as a leasectl older than slots writes it ("run"), so that an
// older leasectl sharing the store during an upgrade still sees the job
// held; a job of several runs writes them all ("runs").
func TestEmbeddedOneRunKeepsTheOlderShape(t *testing.T) {
	e := openEmbedded(t, t.TempDir())
	path := e.recordPath(jobKey("job"))
	req := storetest.Request("job", "a", storetest.LongTTL)
	req.Slots = 2
	storetest.Acquire(t, e, req)
	// The file holds the job's newest records (slot.go), the last write's
	// among them.
	file := func() string {
		b, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if body := file(); !strings.Contains(body, `"run":{"holder":"a"`) || strings.Contains(body, `"runs":`) {
		t.Errorf("one run written as %q, want the older shape", body)
	}
	req.Holder = "b"
	storetest.Acquire(t, e, req)
	if body := file(); !strings.Contains(body, `"runs":[{"holder":"a"`) {
		t.Errorf("two runs written as %q, want both under runs", body)
	}
	if st := storetest.Status(t, e, "job"); len(st.Holders) != 2 {
		t.Errorf("holders %+v, want a and b", st.Holders)
	}
}

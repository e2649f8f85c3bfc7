package filestore

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The due index keeps a folder per hour; Overdue reads the hours begun only
// and removes those wholly passed that are left empty, while a folder that
// still holds an entry (a job overdue) stays.
func TestDueIndexFolders(t *testing.T) {
	s := openEmbedded(t, t.TempDir())
	ctx := context.Background()
	note := leasestore.Note{By: "alice"}
	if err := s.Expect(ctx, "soon", &leasestore.Expectation{Every: time.Millisecond}, note); err != nil {
		t.Fatal(err)
	}
	if err := s.Expect(ctx, "later", &leasestore.Expectation{Every: 48 * time.Hour}, note); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(s.dataDir, dueDir)
	passed := filepath.Join(root, strconv.FormatInt(time.Now().Add(-3*time.Hour).UnixMicro()/windowMicros, 10))
	if err := os.Mkdir(passed, 0o700); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // past soon's millisecond
	list, err := s.Overdue(ctx)
	if err != nil || len(list) != 1 || list[0].Job != "soon" {
		t.Fatalf("Overdue() = %+v, %v; want soon alone", list, err)
	}
	if _, err := os.Stat(passed); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("an empty folder of an hour passed is still there (%v)", err)
	}
	st, err := s.Status(ctx, "later")
	if err != nil {
		t.Fatal(err)
	}
	later := filepath.Dir(s.duePath(jobKey("later"), st.Expect.Due(st.LastSuccess)))
	if names, err := readNames(later); err != nil || len(names) != 1 {
		t.Errorf("the folder of the hour later is due in holds %v (%v), want its entry", names, err)
	}
}

// A process killed between indexing a job's new due time and writing the
// record that names it leaves the record due at its old time: Overdue still
// finds it there once it is due.
func TestOverdueAfterKilledBetweenIndexAndWrite(t *testing.T) {
	s := openEmbedded(t, t.TempDir())
	ctx := context.Background()
	if err := s.Expect(ctx, "job", &leasestore.Expectation{Every: time.Millisecond}, leasestore.Note{By: "alice"}); err != nil {
		t.Fatal(err)
	}
	st, err := s.Status(ctx, "job")
	if err != nil {
		t.Fatal(err)
	}
	key := jobKey("job")
	due := st.Expect.Due(st.LastSuccess)
	if err := s.indexDue(s.recordPath(key), key, due, due.Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Millisecond) // past the millisecond
	list, err := s.Overdue(ctx)
	if err != nil || len(list) != 1 || list[0].Job != "job" {
		t.Fatalf("Overdue() = %+v, %v; want job", list, err)
	}
}

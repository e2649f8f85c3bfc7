package filestore

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/rules"
)

// The due index: an entry per job with an expectation, a link to its record
// named by its due time, <ns>.store/due/<h>/<µs>.<key>, in the folder of the
// hour the due time falls in, as the in-flight index does (file.go). Like
// the other indexes it is a superset of the records: an entry is made
// before the record that needs it is written, and the one it replaces
// removed after the write, so Overdue reads the folders of the hours begun
// and the records of the entries due by now alone: its cost follows the
// overdue jobs, and the jobs due within the hour.

// duePath is the due index entry of key's job, due at due.
func (e *Store) duePath(key string, due time.Time) string {
	us := due.UnixMicro()
	return filepath.Join(e.dataDir, dueDir, strconv.FormatInt(us/windowMicros, 10), strconv.FormatInt(us, 10)+"."+key)
}

// indexDue makes the due index entry a record due at after needs (zero:
// none), before the record is written. The entry at before, if the record
// no longer needs it, is change's to remove after the write: a process
// killed between the two leaves both, and Overdue skips the one the record
// does not name.
func (e *Store) indexDue(target, key string, before, after time.Time) error {
	if after.IsZero() || after.Equal(before) {
		return nil
	}
	return e.link(target, e.duePath(key, after))
}

// Expect sets or clears job's expectation; see Store.
func (e *Store) Expect(ctx context.Context, job string, x *leasestore.Expectation, note leasestore.Note) error {
	return e.update(ctx, "expect", job, func(t *txn, doc *jobDoc) error {
		t.apply(doc, rules.Expect(&doc.Record, x, note, t.now))
		return nil
	})
}

// Overdue lists the jobs past their expectation, ordered by job; see Store.
// It lists the entries of the due index's folders of the hours begun and
// reads the records of the entries due by now alone; an entry its record
// does not need (a process killed between the two) is skipped. The folders
// of hours wholly passed that are left empty are removed.
func (e *Store) Overdue(ctx context.Context) ([]leasestore.Overdue, error) {
	var list []leasestore.Overdue
	err := e.view("list overdue", func(t *txn) error {
		root := filepath.Join(e.dataDir, dueDir)
		windows, err := readNames(root)
		if err != nil {
			return err
		}
		now := t.now.UnixMicro()
		for _, w := range windows {
			start, err := strconv.ParseInt(w, 10, 64)
			if err != nil || start*windowMicros > now {
				continue // not an index folder, or an hour to come
			}
			dir := filepath.Join(root, w)
			names, err := readNames(dir)
			if err != nil {
				return err
			}
			if len(names) == 0 && (start+1)*windowMicros <= now {
				_ = os.Remove(dir) // one a writer fills meanwhile stays
			}
			for _, name := range names {
				us, key, ok := strings.Cut(name, ".")
				at, err := strconv.ParseInt(us, 10, 64)
				if !ok || err != nil || len(key) != 32 || at >= now {
					continue
				}
				doc, err := t.readKey(key, "")
				if err != nil {
					return err
				}
				if o := rules.Overdue(&doc.Record, t.now); o != nil && o.Due.UnixMicro() == at {
					list = append(list, *o)
				}
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	slices.SortFunc(list, func(a, b leasestore.Overdue) int { return strings.Compare(a.Job, b.Job) })
	return list, nil
}

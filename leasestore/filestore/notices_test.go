package filestore

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/noticebook"
)

// The bounds on what a store keeps, on the embedded store's own files with
// a small cap and a clock the test moves: a put past the cap drops the
// oldest, sent first; a claim drops what is past the retention.
func TestNoticesBounded(t *testing.T) {
	e := openEmbedded(t, t.TempDir())
	now := time.Date(2026, 11, 27, 6, 0, 0, 0, time.UTC)
	b := &noticebook.Book{Shelf: (*noticeShelf)(e), Now: func() time.Time { return now }, Cap: 3, Retention: time.Hour}
	ctx := context.Background()
	put := func(keys ...string) {
		t.Helper()
		var ns []leasestore.Notice
		for _, k := range keys {
			ns = append(ns, leasestore.Notice{Key: k, Kind: leasestore.NoticeCrash, Job: "job", At: now})
		}
		if err := b.PutNotices(ctx, ns); err != nil {
			t.Fatal(err)
		}
		now = now.Add(time.Minute)
	}
	// kept reads the files themselves: listing through the Book would
	// prune them.
	kept := func() []string {
		t.Helper()
		recs, err := (*noticeShelf)(e).Load(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var keys []string
		for _, rec := range recs {
			var n leasestore.Notice
			if err := json.Unmarshal(rec, &n); err != nil {
				t.Fatal(err)
			}
			keys = append(keys, n.Key)
		}
		slices.Sort(keys)
		return keys
	}
	put("a")
	put("b")
	claimed, err := b.ClaimNotices(ctx, "reaper", 1, time.Minute)
	if err != nil || len(claimed) != 1 || claimed[0].Key != "a" {
		t.Fatalf("claim = %v, %v; want the oldest, a", claimed, err)
	}
	if err := b.SettleNotice(ctx, "a", "reaper", leasestore.Settlement{Sent: true}); err != nil {
		t.Fatal(err)
	}
	put("c")
	put("d")
	if got := kept(); !slices.Equal(got, []string{"b", "c", "d"}) {
		t.Errorf("past the cap of 3, kept %v; want the sent a dropped first", got)
	}
	put("e")
	if got := kept(); !slices.Equal(got, []string{"c", "d", "e"}) {
		t.Errorf("past the cap again, kept %v; want the oldest unsent, b, dropped", got)
	}
	now = now.Add(time.Hour - 2*time.Minute) // c was put an hour and a minute ago, d an hour ago
	if _, err := b.ClaimNotices(ctx, "reaper", 10, time.Minute); err != nil {
		t.Fatal(err)
	}
	if got := kept(); !slices.Equal(got, []string{"d", "e"}) {
		t.Errorf("after the retention of an hour, kept %v; want c dropped", got)
	}
}

package storetest

import (
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// noticeHold is the claim hold and retry delay of the notice rules: long
// enough that a claim outlives the calls that check it holds, short enough
// that waiting for its end keeps the suite quick.
const noticeHold = 500 * time.Millisecond

func testNotice(key string) leasestore.Notice {
	return leasestore.Notice{Key: key, Kind: leasestore.NoticeCrash, Job: "nightly", At: time.Now().UTC().Truncate(time.Microsecond),
		Worker: "w1", Host: "h1", Token: 7, Crashes: 1, By: leasestore.ByLeasectl, Detail: "job nightly crashed"}
}

func noticeKeys(list []leasestore.Notice) []string {
	keys := make([]string, len(list))
	for i, n := range list {
		keys[i] = n.Key
	}
	slices.Sort(keys)
	return keys
}

// testNoticePut holds a store to PutNotices (docs/semantics.md, Notices):
// a notice is kept once per key, a second put of its key, even with other
// content, changing nothing; a notice without a key is refused before any
// I/O.
func testNoticePut(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	first := testNotice("crash/nightly/7")
	if err := s.PutNotices(Ctx(t), []leasestore.Notice{first, testNotice("crash/nightly/8")}); err != nil {
		t.Fatalf("PutNotices: %v", err)
	}
	again := first
	again.Detail = "the same event, told again"
	if err := s.PutNotices(Ctx(t), []leasestore.Notice{again}); err != nil {
		t.Fatalf("PutNotices of a kept key: %v", err)
	}
	list, err := s.ListNotices(Ctx(t))
	if err != nil {
		t.Fatalf("ListNotices: %v", err)
	}
	if got := noticeKeys(list); fmt.Sprint(got) != "[crash/nightly/7 crash/nightly/8]" {
		t.Fatalf("kept notices %q, want each key once", got)
	}
	i := slices.IndexFunc(list, func(n leasestore.Notice) bool { return n.Key == first.Key })
	if n := list[i]; n.Detail != first.Detail || n.Kind != first.Kind || n.Job != first.Job || n.Token != first.Token ||
		n.Worker != first.Worker || n.Crashes != first.Crashes || !n.At.Equal(first.At) ||
		n.Sent() || n.Attempts != 0 || n.Recorded.IsZero() {
		t.Errorf("kept notice %+v, want the first put's %+v, not sent, no attempt, recorded", n, first)
	}
	err = s.PutNotices(Ctx(t), []leasestore.Notice{{Kind: leasestore.NoticeCrash, Job: "nightly", At: time.Now()}})
	if err == nil || errors.Is(err, leasestore.ErrUnavailable) {
		t.Errorf("PutNotices of a notice without a key = %v, want a usage error", err)
	}
}

// testNoticeClaim holds a store to ClaimNotices: clients claiming at once
// get disjoint notices whose union is all the due ones; a claim that holds
// keeps the notice from everyone, and one past its hold may be claimed by
// another owner, the first owner then unable to settle it.
func testNoticeClaim(t *testing.T, h fixture) {
	a, b := client(t, h.Fixture), client(t, h.Fixture)
	var put []leasestore.Notice
	for i := range 12 {
		put = append(put, testNotice(fmt.Sprintf("crash/nightly/%d", i)))
	}
	if err := a.PutNotices(Ctx(t), put); err != nil {
		t.Fatalf("PutNotices: %v", err)
	}
	var wg sync.WaitGroup
	got := make([][]leasestore.Notice, 2)
	for i, s := range []Client{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 4 {
				list, err := s.ClaimNotices(Ctx(t), fmt.Sprintf("owner-%d", i), 2, time.Minute)
				if err != nil {
					t.Errorf("ClaimNotices: %v", err)
					return
				}
				got[i] = append(got[i], list...)
			}
		}()
	}
	wg.Wait()
	all := append(noticeKeys(got[0]), noticeKeys(got[1])...)
	slices.Sort(all)
	if fmt.Sprint(all) != fmt.Sprint(noticeKeys(put)) {
		t.Fatalf("two owners claimed %q and %q; want every notice claimed by exactly one", noticeKeys(got[0]), noticeKeys(got[1]))
	}
	for i, list := range got {
		for _, n := range list {
			if n.Owner != fmt.Sprintf("owner-%d", i) || n.Attempts != 1 {
				t.Errorf("claimed notice %+v: want owner-%d, one attempt", n, i)
			}
		}
	}
	if list, err := a.ClaimNotices(Ctx(t), "owner-2", 100, time.Minute); err != nil || len(list) != 0 {
		t.Errorf("claiming notices whose claims hold = %q, %v; want none", noticeKeys(list), err)
	}

	if err := a.PutNotices(Ctx(t), []leasestore.Notice{testNotice("short")}); err != nil {
		t.Fatal(err)
	}
	claimed := time.Now()
	if list, err := a.ClaimNotices(Ctx(t), "first", 100, noticeHold); err != nil || fmt.Sprint(noticeKeys(list)) != "[short]" {
		t.Fatalf("ClaimNotices = %q, %v; want the new notice", noticeKeys(list), err)
	}
	var second []leasestore.Notice
	for guard := time.Now().Add(noticeHold + HangGuard); len(second) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatalf("a claim past its hold of %s was never claimable again", noticeHold)
		}
		list, err := b.ClaimNotices(Ctx(t), "second", 100, time.Minute)
		if err != nil {
			t.Fatalf("ClaimNotices: %v", err)
		}
		second = list
	}
	if held := time.Since(claimed); held < noticeHold {
		t.Errorf("a notice claimed for %s was claimed again by another owner after %s", noticeHold, held)
	}
	if n := second[0]; n.Key != "short" || n.Owner != "second" || n.Attempts != 2 {
		t.Errorf("reclaimed notice %+v, want short, owner second, attempt 2", n)
	}
	err := a.SettleNotice(Ctx(t), "short", "first", leasestore.Settlement{Sent: true})
	if !errors.Is(err, leasestore.ErrNoticeNotHeld) {
		t.Errorf("settling a notice claimed since by another owner = %v, want ErrNoticeNotHeld", err)
	}
}

// testNoticeSettle holds a store to SettleNotice: a notice settled as sent
// is never claimed again and is listed as sent; one settled to retry is
// not due before its delay and due after it, its error and the sinks that
// took it kept.
func testNoticeSettle(t *testing.T, h fixture) {
	s := client(t, h.Fixture)
	if err := s.PutNotices(Ctx(t), []leasestore.Notice{testNotice("sent"), testNotice("retried")}); err != nil {
		t.Fatal(err)
	}
	list, err := s.ClaimNotices(Ctx(t), "reaper", 10, time.Minute)
	if err != nil || len(list) != 2 {
		t.Fatalf("ClaimNotices = %q, %v; want both", noticeKeys(list), err)
	}
	if err := s.SettleNotice(Ctx(t), "sent", "reaper", leasestore.Settlement{Sent: true}); err != nil {
		t.Fatalf("SettleNotice sent: %v", err)
	}
	settled := time.Now()
	if err := s.SettleNotice(Ctx(t), "retried", "reaper", leasestore.Settlement{RetryIn: noticeHold, Error: "HTTP 503", SentTo: []string{"command tee#0a1b"}}); err != nil {
		t.Fatalf("SettleNotice to retry: %v", err)
	}
	if err := s.SettleNotice(Ctx(t), "sent", "reaper", leasestore.Settlement{Sent: true}); !errors.Is(err, leasestore.ErrNoticeNotHeld) {
		t.Errorf("settling a sent notice again = %v, want ErrNoticeNotHeld", err)
	}
	if err := s.SettleNotice(Ctx(t), "unknown", "reaper", leasestore.Settlement{Sent: true}); !errors.Is(err, leasestore.ErrNoticeNotHeld) {
		t.Errorf("settling a notice the store does not keep = %v, want ErrNoticeNotHeld", err)
	}
	kept, err := s.ListNotices(Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range kept {
		if n.Key == "sent" && !n.Sent() || n.Key == "retried" && (n.Sent() || n.LastError != "HTTP 503" || n.Owner != "" ||
			!slices.Equal(n.SentTo, []string{"command tee#0a1b"})) {
			t.Errorf("kept notice %+v after its settlement", n)
		}
	}
	var again []leasestore.Notice
	for guard := time.Now().Add(noticeHold + HangGuard); len(again) == 0; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatalf("a notice to retry in %s was never due again", noticeHold)
		}
		if again, err = s.ClaimNotices(Ctx(t), "reaper", 10, noticeHold); err != nil {
			t.Fatal(err)
		}
	}
	if waited := time.Since(settled); waited < noticeHold {
		t.Errorf("a notice to retry in %s was due again after %s", noticeHold, waited)
	}
	if fmt.Sprint(noticeKeys(again)) != "[retried]" || !slices.Equal(again[0].SentTo, []string{"command tee#0a1b"}) {
		t.Errorf("due again: %q, want the retried notice alone (the sent one never), with the sink that took it", noticeKeys(again))
	}
}

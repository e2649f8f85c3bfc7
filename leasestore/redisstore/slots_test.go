package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// TestRedisSlotZeroKeepsTheOlderKeys: the run in a job's slot 0 is kept in
// the keys a leasectl older than slots reads (the evidence <p><job>:e and
// the job's entry in <p>live, whose score is its liveness), so an older
// leasectl sharing the Redis during an upgrade sees a one-slot job held;
// the runs in other slots, and the queue, are in keys of their own with
// the shard's hash tag.
func TestRedisSlotZeroKeepsTheOlderKeys(t *testing.T) {
	srv := testRedis.Get(t)
	ns := freshNamespace()
	s := openRedis(t, srv.URL, ns)
	do := func(args ...string) string {
		t.Helper()
		v, err := srv.Do(args...)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	const job = "encode"
	tag := fmt.Sprintf("%s:{%d}:", ns, shardOf(job))
	slotted := func(worker string, slots int, wait bool) leasestore.AcquireRequest {
		req := storetest.Request(job, worker, storetest.LongTTL)
		req.Slots, req.Wait = slots, wait
		return req
	}
	// What an older leasectl reads of the job: the holder and token of the
	// evidence, and whether the job's index score lies ahead.
	olderView := func() (holder string, token int64, live bool) {
		t.Helper()
		f := strings.Split(do("GET", tag+job+":e"), sep)
		if len(f) > 1 {
			holder = f[0]
			token, _ = strconv.ParseInt(f[1], 10, 64)
		}
		score, _ := strconv.ParseInt(do("ZSCORE", tag+"live", job), 10, 64)
		now, _ := strconv.ParseInt(strings.Split(do("TIME"), "\n")[0], 10, 64)
		return holder, token, score > now*1_000_000
	}

	a := storetest.Acquire(t, s, slotted("a", 1, false))
	if holder, token, live := olderView(); holder != "a" || token != a.Token || !live {
		t.Errorf("an older leasectl reads holder %q token %d live %v, want a's live run %d", holder, token, live, a.Token)
	}
	if n := do("HGET", tag+job+":r", "n"); n != "" {
		t.Errorf("a one-slot job's record has n=%q, want no such field", n)
	}
	storetest.Release(t, s, a, leasestore.ResultCompleted)

	b := storetest.Acquire(t, s, slotted("b", 2, false))
	c := storetest.Acquire(t, s, slotted("c", 2, false))
	if _, err := s.Acquire(storetest.Ctx(t), slotted("d", 2, true)); err == nil {
		t.Fatal("d was granted a third run of a job of 2 slots")
	}
	if holder, token, live := olderView(); holder != "b" || token != b.Token || !live || b.Slot != 0 {
		t.Errorf("an older leasectl reads holder %q token %d live %v, want b's live run %d in slot 0", holder, token, live, b.Token)
	}
	if ev := do("GET", tag+job+":e1"); !strings.HasPrefix(ev, "c"+sep+strconv.FormatInt(c.Token, 10)+sep) || c.Slot != 1 {
		t.Errorf("slot 1's evidence %q, want c's run %d", ev, c.Token)
	}
	keys := strings.Split(do("KEYS", ns+":*"), "\n")
	slices.Sort(keys)
	want := []string{tag + job + ":e", tag + job + ":e1", tag + job + ":h", tag + job + ":q", tag + job + ":r",
		tag + "jobs", tag + "live", tag + "slots"}
	if !slices.Equal(keys, want) {
		t.Errorf("keys %q, want %q: each with the shard's hash tag", keys, want)
	}
}

// TestRedisQuarantineOfAnOlderLeasectl: a quarantine an older leasectl
// wrote names no holder of its own (ql, qo), and reads as naming the job's
// last holder and host, as the older one showed it.
func TestRedisQuarantineOfAnOlderLeasectl(t *testing.T) {
	srv := testRedis.Get(t)
	ns := freshNamespace()
	s := openRedis(t, srv.URL, ns)
	const job = "report"
	tag := fmt.Sprintf("%s:{%d}:", ns, shardOf(job))
	if _, err := srv.Do("HSET", tag+job+":r", "t", "7", "lh", "w1", "lo", "host1", "q", "5", "qr", "2 consecutive crashes",
		"qb", "leasectl", "qc", "2"); err != nil {
		t.Fatal(err)
	}
	if _, err := srv.Do("SADD", tag+"quarantined", job); err != nil {
		t.Fatal(err)
	}
	st := storetest.Status(t, s, job)
	if q := st.Quarantine; q == nil || q.LastHolder != "w1" || q.LastHost != "host1" {
		t.Errorf("status quarantine %+v, want it naming w1 on host1", st.Quarantine)
	}
	list, err := s.Quarantined(storetest.Ctx(t))
	if err != nil || len(list) != 1 || list[0].LastHolder != "w1" || list[0].LastHost != "host1" {
		t.Errorf("Quarantined = %+v, %v; want report naming w1 on host1", list, err)
	}
}

// TestSentinelQueueOrderAfterAFailover promotes a replica that has the
// first waiters but missed the last one's joining: the promoted primary
// serves the waiters it has in the order they joined, and the one it
// missed joins again, at the tail, when it next asks (docs/redis-layout.md,
// What a failover keeps).
func TestSentinelQueueOrderAfterAFailover(t *testing.T) {
	topo := startSentinel(t, redistest.SentinelOptions{})
	ns := freshNamespace()
	s := openRedis(t, topo.URL(), ns)
	waiting := func(worker string) leasestore.AcquireRequest {
		req := storetest.Request("job", worker, storetest.LongTTL)
		req.Wait = true
		return req
	}
	storetest.Acquire(t, s, waiting("a"))
	for _, w := range []string{"b", "c", "d"} {
		if _, err := s.Acquire(storetest.Ctx(t), waiting(w)); err == nil {
			t.Fatalf("%s was granted the job a holds", w)
		}
	}
	// e's joining reaches the old primary alone.
	cutReplicasOff(t, s)
	if _, err := s.Acquire(storetest.Ctx(t), waiting("e")); err == nil {
		t.Fatal("e was granted the job a holds")
	}
	primary, err := topo.Primary()
	if err != nil {
		t.Fatal(err)
	}
	if err := primary.Kill(); err != nil {
		t.Fatal(err)
	}
	if _, err := topo.WaitFailover(failoverTimeout); err != nil {
		t.Fatal(err)
	}
	after := openRedis(t, topo.URL(), ns)
	st := storetest.Status(t, after, "job")
	if got := waiters(st.Queue); !slices.Equal(got, []string{"b", "c", "d"}) || st.Holder == nil || st.Holder.Worker != "a" {
		t.Fatalf("the promoted replica has holder %+v and queue %v, want a holding and b, c, d waiting", st.Holder, got)
	}
	_, err = after.Acquire(storetest.Ctx(t), waiting("e"))
	var held *leasestore.HeldError
	if !errors.As(err, &held) || held.Position != 4 {
		t.Fatalf("e asking again after the failover: %v, want it held at position 4", err)
	}
	storetest.Release(t, after, &leasestore.Lease{Job: "job", Holder: "a", Token: st.Holder.Token}, leasestore.ResultCompleted)
	for _, w := range []string{"e", "d", "c"} {
		if l, err := after.Acquire(storetest.Ctx(t), waiting(w)); err == nil {
			t.Fatalf("%s was granted %+v before b, the oldest waiter", w, l)
		}
	}
	storetest.Acquire(t, after, waiting("b"))
}

func waiters(queue []leasestore.Waiter) []string {
	var w []string
	for _, q := range queue {
		w = append(w, q.Worker)
	}
	return w
}

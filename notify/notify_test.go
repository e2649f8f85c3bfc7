package notify

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/clock/fakeclock"
	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// openStore opens a client of the embedded store in dir, as one more
// process would.
func openStore(t *testing.T, dir string) *leasestore.Store {
	t.Helper()
	s, err := filestore.Open(dir, "notify")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return leasestore.New(s)
}

func webhook(t *testing.T, url string, f Format) *Webhook {
	t.Helper()
	w, err := NewWebhook(url, f, nil, "leasectl/test")
	if err != nil {
		t.Fatal(err)
	}
	return w
}

// deliverer sends s's notices to sinks as owner, retrying at once (a
// backoff of a nanosecond), each send bounded by a second.
func deliverer(s *leasestore.Store, owner string, sinks ...Sink) *Deliverer {
	return &Deliverer{Store: s, Sinks: sinks, Owner: owner, Namespace: "notify", Timeout: time.Second,
		Backoff: time.Nanosecond, MaxBackoff: time.Nanosecond, Log: zerolog.Nop()}
}

// await waits until cond holds, checking every 10 ms, for at most 10 s:
// for what the store's own clock must reach.
func await(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for guard := time.Now().Add(10 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(guard) {
			t.Fatalf("gave up waiting for %s", what)
		}
	}
}

// crashOnce leaves a run of job whose supervisor vanished, and waits until
// the store reports its lease expired.
func crashOnce(t *testing.T, s *leasestore.Store, job string, maxCrashes int) *leasestore.Lease {
	t.Helper()
	req := storetest.Request(job, "w-"+job, 50*time.Millisecond)
	req.MaxCrashes = maxCrashes
	l := storetest.Acquire(t, s, req)
	await(t, "the lease of "+job+" to expire", func() bool { return storetest.Status(t, s, job).State == leasestore.StateCrashed })
	return l
}

// Every kind of event, made by what makes it in production (the reaper's
// passes, a run's Acquire, an operator's release, a run that lost its
// lease), arrives once at a real HTTP receiver, with the documented body
// and the idempotency key in its header and its body.
func TestEveryEventKindArrivesOnce(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	rcv := newReceiver(t)
	reaper := &inspect.Reaper{Store: s, RecordNotices: true, NoticeFailed: func(err error) { t.Errorf("recording notices: %v", err) }}

	// crash and quarantined: the reaper counts a crash at the threshold.
	crashed := crashOnce(t, s, "poison", 1)
	// A crash the next run's Acquire counts, recorded by that run.
	crashOnce(t, s, "flaky", 3)
	next, err := s.Acquire(storetest.Ctx(t), storetest.Request("flaky", "w-next", time.Minute))
	if err != nil || next.Recovered == nil {
		t.Fatalf("the next run's Acquire: %v, recovered %+v; want the previous crash counted", err, next)
	}
	if err := s.PutNotices(storetest.Ctx(t), leasestore.CrashNotices(*next.Recovered)); err != nil {
		t.Fatal(err)
	}
	// overdue: a job expected every second, never run.
	if err := s.Expect(storetest.Ctx(t), "nightly", &leasestore.Expectation{Every: time.Second}, leasestore.Note{By: "alice", Reason: "t"}); err != nil {
		t.Fatal(err)
	}
	await(t, "nightly to fall overdue", func() bool { st := storetest.Status(t, s, "nightly"); return st.Overdue() })
	if _, err := reaper.Pass(storetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	// back-in-time: it succeeds, and the next pass sees it in time.
	run := storetest.Acquire(t, s, storetest.Request("nightly", "w-nightly", time.Minute))
	if err := s.Release(storetest.Ctx(t), run, leasestore.Outcome{Result: leasestore.ResultCompleted}); err != nil {
		t.Fatal(err)
	}
	if _, err := reaper.Pass(storetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	// quarantine-released, as `leasectl quarantine release` records it.
	note := leasestore.Note{By: "alice", Reason: "fixed the input"}
	if err := s.ReleaseQuarantine(storetest.Ctx(t), "poison", note); err != nil {
		t.Fatal(err)
	}
	if err := s.PutNotices(storetest.Ctx(t), []leasestore.Notice{leasestore.QuarantineNotice("poison", true, note, time.Now())}); err != nil {
		t.Fatal(err)
	}
	// lease-lost, as a supervisor that killed its child records it.
	lost := storetest.Acquire(t, s, storetest.Request("etl", "w-etl", time.Minute))
	if err := s.PutNotices(storetest.Ctx(t), []leasestore.Notice{leasestore.LeaseLostNotice(lost, "host-etl", "lease lost: no renewal confirmed in time", time.Now())}); err != nil {
		t.Fatal(err)
	}

	d := deliverer(s, "reaper-1", webhook(t, rcv.URL+"/hook", FormatJSON))
	if err := d.Pass(storetest.Ctx(t)); err != nil {
		t.Fatalf("Pass: %v", err)
	}
	if err := d.Pass(storetest.Ctx(t)); err != nil {
		t.Fatalf("second Pass: %v", err)
	}
	want := map[string]leasestore.NoticeKind{
		leasestore.NoticeKey(leasestore.NoticeCrash, "poison", crashed.Token):       leasestore.NoticeCrash,
		leasestore.NoticeKey(leasestore.NoticeQuarantined, "poison", crashed.Token): leasestore.NoticeQuarantined,
		leasestore.NoticeKey(leasestore.NoticeCrash, "flaky", next.Recovered.Token): leasestore.NoticeCrash,
		leasestore.NoticeKey(leasestore.NoticeLeaseLost, "etl", lost.Token):         leasestore.NoticeLeaseLost,
	}
	got := rcv.events()
	kinds := map[leasestore.NoticeKind]int{}
	for _, a := range got {
		e := a.event
		kinds[e.Kind]++
		if k, ok := want[e.IdempotencyKey]; ok && k != e.Kind {
			t.Errorf("event %s has kind %s, want %s", e.IdempotencyKey, e.Kind, k)
		}
		if e.Schema != Schema || e.IdempotencyKey == "" || a.header.Get(HeaderIdempotencyKey) != e.IdempotencyKey ||
			a.header.Get("Content-Type") != "application/json" || e.Namespace != "notify" || e.At.IsZero() ||
			e.Text == "" || !strings.Contains(e.Text, e.Job) || e.Attempt != 1 || !strings.HasPrefix(e.IdempotencyKey, string(e.Kind)+"/"+e.Job+"/") {
			t.Errorf("event %s: header key %q; want schema %s, the key in the header, namespace, time, text naming the job, attempt 1",
				a.body, a.header.Get(HeaderIdempotencyKey), Schema)
		}
		if (e.Kind == leasestore.NoticeOverdue || e.Kind == leasestore.NoticeBackInTime) && (e.Due == nil || e.Job != "nightly") {
			t.Errorf("%s event %s: want nightly's due time", e.Kind, a.body)
		}
		if e.Kind == leasestore.NoticeCrash && (e.Worker == "" || e.Host == "" || e.Token == 0 || e.Crashes == 0) {
			t.Errorf("crash event %s: want its worker, host, token and crashes", a.body)
		}
	}
	for _, k := range leasestore.NoticeKinds {
		n := 1
		if k == leasestore.NoticeCrash {
			n = 2
		}
		if kinds[k] != n {
			t.Errorf("%d %s events arrived, want %d (all: %v)", kinds[k], k, n, kinds)
		}
	}
	for key, n := range rcv.byKey() {
		if n != 1 {
			t.Errorf("event %s arrived %d times, want once", key, n)
		}
	}
	kept, err := s.ListNotices(storetest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range kept {
		if !n.Sent() {
			t.Errorf("notice %s is not marked sent after its delivery", n.Key)
		}
	}
}

// A receiver down for a while, and the reaper restarted meanwhile (one of
// them killed between its claim and its settlement): nothing is lost, and
// nothing arrives twice past its idempotency key.
func TestReceiverDownAndReaperRestarted(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	rcv := newReceiver(t)
	var put []leasestore.Notice
	for i := range 8 {
		put = append(put, leasestore.Notice{Key: fmt.Sprintf("crash/job-%d/1", i), Kind: leasestore.NoticeCrash,
			Job: fmt.Sprintf("job-%d", i), At: time.Now(), Detail: fmt.Sprintf("job job-%d crashed", i)})
	}
	if err := s.PutNotices(storetest.Ctx(t), put); err != nil {
		t.Fatal(err)
	}
	rcv.down.Store(true)
	first := deliverer(s, "reaper-before", webhook(t, rcv.URL, FormatJSON))
	for range 2 {
		if err := first.Pass(storetest.Ctx(t)); err != nil {
			t.Fatalf("Pass with the receiver down: %v", err)
		}
	}
	kept, err := s.ListNotices(storetest.Ctx(t))
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range kept {
		if n.Sent() || n.Attempts != 2 || !strings.Contains(n.LastError, "503") {
			t.Errorf("notice %s after two refused passes: sent %v, attempts %d, error %q; want unsent, 2, the 503",
				n.Key, n.Sent(), n.Attempts, n.LastError)
		}
	}
	// The reaper is killed while it holds a claim: it never settles it.
	killed, err := s.ClaimNotices(storetest.Ctx(t), "reaper-killed", 1, 300*time.Millisecond)
	if err != nil || len(killed) != 1 {
		t.Fatalf("claim of the reaper to be killed: %v, %v", killed, err)
	}

	rcv.down.Store(false)
	after := deliverer(openStore(t, dir), "reaper-after", webhook(t, rcv.URL, FormatJSON))
	if err := after.Pass(storetest.Ctx(t)); err != nil {
		t.Fatalf("Pass after the restart: %v", err)
	}
	if got := rcv.byKey(); len(got) != len(put)-1 || got[killed[0].Key] != 0 {
		t.Fatalf("after the restart %d events arrived (%v); want all but the one a killed reaper's claim holds", len(got), got)
	}
	await(t, "the killed reaper's claim to lapse and its notice to arrive", func() bool {
		if err := after.Pass(storetest.Ctx(t)); err != nil {
			t.Fatal(err)
		}
		return len(rcv.byKey()) == len(put)
	})
	for key, n := range rcv.byKey() {
		if n != 1 {
			t.Errorf("event %s arrived %d times, want once", key, n)
		}
	}
	for _, a := range rcv.events() {
		if want := 3; a.event.IdempotencyKey != killed[0].Key && a.event.Attempt != want {
			t.Errorf("event %s arrived as attempt %d, want %d (two refused, then this one)", a.event.IdempotencyKey, a.event.Attempt, want)
		}
	}
	if err := s.SettleNotice(storetest.Ctx(t), killed[0].Key, "reaper-killed", leasestore.Settlement{Sent: true}); err == nil {
		t.Errorf("the killed reaper settled a notice another reaper claimed and sent since")
	}
}

// Two reapers on one store, each with its own client as on two hosts,
// delivering at once: every event arrives once.
func TestTwoReapersSendEachEventOnce(t *testing.T) {
	dir := t.TempDir()
	rcv := newReceiver(t)
	var put []leasestore.Notice
	for i := range 40 {
		put = append(put, leasestore.Notice{Key: fmt.Sprintf("crash/job-%02d/1", i), Kind: leasestore.NoticeCrash,
			Job: fmt.Sprintf("job-%02d", i), At: time.Now(), Detail: "crashed"})
	}
	if err := openStore(t, dir).PutNotices(storetest.Ctx(t), put); err != nil {
		t.Fatal(err)
	}
	reapers := []*Deliverer{
		deliverer(openStore(t, dir), "host-a:1", webhook(t, rcv.URL, FormatJSON)),
		deliverer(openStore(t, dir), "host-b:1", webhook(t, rcv.URL, FormatJSON)),
	}
	for _, d := range reapers {
		d.Batch = 3
	}
	errs := make(chan error, len(reapers))
	for _, d := range reapers {
		go func() { errs <- d.Pass(storetest.Ctx(t)) }()
	}
	for range reapers {
		if err := <-errs; err != nil {
			t.Fatalf("Pass: %v", err)
		}
	}
	got := rcv.byKey()
	if len(got) != len(put) {
		t.Errorf("%d events arrived, want %d", len(got), len(put))
	}
	for key, n := range got {
		if n != 1 {
			t.Errorf("event %s arrived %d times, want once", key, n)
		}
	}
}

// Run delivers at once when the reaper recorded notices (Kick), without
// waiting for its interval, which the test's clock never reaches.
func TestKickDeliversWithoutWaitingForTheInterval(t *testing.T) {
	s := openStore(t, t.TempDir())
	rcv := newReceiver(t)
	d := deliverer(s, "reaper", webhook(t, rcv.URL, FormatJSON))
	d.Clock = fakeclock.New(time.Now()) // never advanced: the interval never passes
	ctx, cancel := context.WithCancel(storetest.Ctx(t))
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	reaper := &inspect.Reaper{Store: s, RecordNotices: true, Recorded: d.Kick}
	crashOnce(t, s, "job", 3)
	crashes, err := reaper.Pass(storetest.Ctx(t))
	if err != nil || len(crashes) != 1 {
		t.Fatalf("Pass: %v, %v", crashes, err)
	}
	select {
	case <-rcv.arrived:
	case <-time.After(storetest.HangGuard):
		t.Fatal("the crash's event did not arrive after the reaper recorded it")
	}
	if got := rcv.byKey(); !slices.Equal(keys(got), []string{leasestore.NoticeKey(leasestore.NoticeCrash, "job", crashes[0].Token)}) {
		t.Errorf("arrived %v, want the crash alone", got)
	}
}

func keys(m map[string]int) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// A pass whose sink fails stops claiming after that batch, even when its
// notices are due again at once: a sink that is down costs a batch per
// pass, not a loop.
func TestFailingSinkCostsABatchPerPass(t *testing.T) {
	s := openStore(t, t.TempDir())
	rcv := newReceiver(t)
	rcv.down.Store(true)
	var put []leasestore.Notice
	for i := range 7 {
		put = append(put, leasestore.Notice{Key: fmt.Sprintf("crash/j/%d", i), Kind: leasestore.NoticeCrash, Job: "j", At: time.Now()})
	}
	if err := s.PutNotices(storetest.Ctx(t), put); err != nil {
		t.Fatal(err)
	}
	d := deliverer(s, "reaper", webhook(t, rcv.URL, FormatJSON))
	d.Batch = 3
	if err := d.Pass(storetest.Ctx(t)); err != nil {
		t.Fatal(err)
	}
	rcv.mu.Lock()
	refused := rcv.refused
	rcv.mu.Unlock()
	if refused != 3 {
		t.Errorf("a pass with the sink down tried %d deliveries, want one batch of 3", refused)
	}
}

// A hung sink never delays crash counting: while the Deliverer waits on it,
// the reaper's passes go on, count the next crash and record its notice.
func TestHungSinkDoesNotDelayTheReaper(t *testing.T) {
	s := openStore(t, t.TempDir())
	stuck := &blocking{entered: make(chan struct{}, 8)}
	d := deliverer(s, "reaper", stuck)
	d.Timeout = time.Hour
	ctx, cancel := context.WithCancel(storetest.Ctx(t))
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx, time.Hour) }()
	defer func() { cancel(); <-done }()
	reaper := &inspect.Reaper{Store: s, RecordNotices: true, Recorded: d.Kick}

	crashOnce(t, s, "first", 3)
	if crashes, err := reaper.Pass(storetest.Ctx(t)); err != nil || len(crashes) != 1 {
		t.Fatalf("first pass: %v, %v", crashes, err)
	}
	select {
	case <-stuck.entered:
	case <-time.After(storetest.HangGuard):
		t.Fatal("the first crash's notice never reached the sink")
	}
	crashOnce(t, s, "second", 3)
	start := time.Now()
	crashes, err := reaper.Pass(storetest.Ctx(t))
	if err != nil || len(crashes) != 1 || crashes[0].Job != "second" {
		t.Fatalf("the pass while the sink hangs: %v, %v; want the second crash counted", crashes, err)
	}
	if took := time.Since(start); took > storetest.HangGuard {
		t.Errorf("the pass while the sink hangs took %s", took)
	}
	kept, err := s.ListNotices(storetest.Ctx(t))
	if err != nil || len(kept) != 2 {
		t.Errorf("notices kept while the sink hangs: %v, %v; want both crashes", kept, err)
	}
}

// blocking is a sink that hangs until its attempt is given up.
type blocking struct{ entered chan struct{} }

func (b *blocking) Send(ctx context.Context, _ Event) error {
	b.entered <- struct{}{}
	<-ctx.Done()
	return ctx.Err()
}
func (b *blocking) String() string { return "blocking sink" }
func (b *blocking) ID() string     { return "blocking sink#0" }

// One sink down neither holds the event back from the others nor makes
// them get it again, in whichever order they come: each sink gets it once,
// the one that was down once it is back, and the notice is sent then.
func TestOneSinkDownNeitherBlocksNorRepeatsTheOthers(t *testing.T) {
	for _, downFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("down first %v", downFirst), func(t *testing.T) {
			dir := t.TempDir()
			s := openStore(t, dir)
			key := "crash/j/1"
			if err := s.PutNotices(storetest.Ctx(t), []leasestore.Notice{{Key: key, Kind: leasestore.NoticeCrash, Job: "j", At: time.Now()}}); err != nil {
				t.Fatal(err)
			}
			down, up := newReceiver(t), newReceiver(t)
			down.down.Store(true)
			sinks := func() []Sink {
				ss := []Sink{webhook(t, down.URL+"/down", FormatJSON), webhook(t, up.URL+"/up", FormatJSON)}
				if !downFirst {
					slices.Reverse(ss)
				}
				return ss
			}
			d := deliverer(s, "reaper", sinks()...)
			for range 5 {
				if err := d.Pass(storetest.Ctx(t)); err != nil {
					t.Fatal(err)
				}
			}
			if got := up.byKey(); got[key] != 1 {
				t.Errorf("after 5 passes with the other sink down, the sink that is up got %v, want the event once", got)
			}
			kept, err := s.ListNotices(storetest.Ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			upID := webhook(t, up.URL+"/up", FormatJSON).ID()
			if n := kept[0]; n.Sent() || !slices.Equal(n.SentTo, []string{upID}) || n.Attempts != 5 || !strings.Contains(n.LastError, "503") {
				t.Errorf("notice after 5 passes: sent %v, sent to %q, attempts %d, error %q; want unsent, sent to %q, 5, the 503",
					n.Sent(), n.SentTo, n.Attempts, n.LastError, upID)
			}
			down.down.Store(false)
			// Another reaper, its sinks built from the same flags, takes over.
			after := deliverer(openStore(t, dir), "reaper-after", sinks()...)
			for range 2 {
				if err := after.Pass(storetest.Ctx(t)); err != nil {
					t.Fatal(err)
				}
			}
			if got, gotUp := down.byKey(), up.byKey(); got[key] != 1 || gotUp[key] != 1 {
				t.Errorf("once the sink is back: it got %v, the other %v; want the event once each", got, gotUp)
			}
			kept, err = s.ListNotices(storetest.Ctx(t))
			if err != nil {
				t.Fatal(err)
			}
			if n := kept[0]; !n.Sent() || len(n.SentTo) != 2 {
				t.Errorf("notice once every sink took it: sent %v, sent to %q; want sent, to both", n.Sent(), n.SentTo)
			}
		})
	}
}

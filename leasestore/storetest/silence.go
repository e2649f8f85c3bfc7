package storetest

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// The timing of RideOutSilence's runs, the one issue 22 measured with:
// --ttl 6s --heartbeat 1s --safety 3s.
const (
	SilenceTTL       = 6 * time.Second
	SilenceHeartbeat = time.Second
	SilenceSafety    = 3 * time.Second
	// SilenceFor is how long the endpoint stays silent: three safety
	// windows.
	SilenceFor = 3 * SilenceSafety
	// SilenceNewRunWithin is how soon a run that starts meanwhile must be
	// granted its lease: the hedge bound (500 ms) and a few requests,
	// where one that waits on the silent endpoint takes --safety.
	SilenceNewRunWithin = time.Second
	// silenceNewRuns start one after the other, the first at once.
	silenceNewRuns = 10
)

// Silence is the timing of a RideOutSilenceWith: the runs' --ttl,
// --heartbeat and --safety, how long the endpoint stays silent (three
// safety windows), and how soon a run that starts meanwhile must be
// granted its lease.
type Silence struct {
	TTL, Heartbeat, Safety time.Duration
	For                    time.Duration
	NewRunWithin           time.Duration
}

// defaultSilence is RideOutSilence's timing.
var defaultSilence = Silence{TTL: SilenceTTL, Heartbeat: SilenceHeartbeat, Safety: SilenceSafety,
	For: SilenceFor, NewRunWithin: SilenceNewRunWithin}

// RideOutSilence is RideOutSilenceWith defaultSilence.
func RideOutSilence(t *testing.T, open func(t *testing.T) leasestore.Driver, silence func()) {
	t.Helper()
	RideOutSilenceWith(t, defaultSilence, open, silence)
}

// RideOutSilenceWith holds that a store of several endpoints rides out one
// of them going silent: two runs hold leases and renew them every heartbeat
// as the supervisor does, then silence makes the endpoint every client
// tries first silent for tm.For, while new runs acquire and release a
// job one after the other, each through a client of its own (open: as a
// new process would). Every renewal must be confirmed within the safety
// window counted from the send time of the last confirmed one (a failed one
// retried within it, as the supervisor retries), every new run granted
// within tm.NewRunWithin, and tokens must rise.
func RideOutSilenceWith(t *testing.T, tm Silence, open func(t *testing.T) leasestore.Driver, silence func()) {
	t.Helper()
	acquire := func(s Client, job, worker string) (*leasestore.Lease, time.Time) {
		t.Helper()
		sent := time.Now()
		ctx, cancel := context.WithTimeout(t.Context(), tm.Safety)
		defer cancel()
		l, err := s.Acquire(ctx, Request(job, worker, tm.TTL))
		if err != nil {
			t.Fatalf("acquire %s by %s: %v", job, worker, err)
		}
		return l, sent
	}
	stop, lost := make(chan struct{}), make(chan error, 2)
	var wg sync.WaitGroup
	var holders []*leasestore.Lease
	last := int64(0)
	for _, job := range []string{"held1", "held2"} {
		s := leasestore.New(open(t))
		l, sent := acquire(s, job, "holder-"+job)
		last = max(last, l.Token)
		holders = append(holders, l)
		wg.Go(func() { renewing(s, tm, l, sent, stop, lost) })
	}
	defer func() {
		close(stop)
		wg.Wait()
	}()

	silenced := time.Now()
	silence()
	pace := time.NewTicker(tm.For / silenceNewRuns)
	defer pace.Stop()
	next := func() {
		t.Helper()
		select {
		case <-pace.C:
		case err := <-lost:
			t.Fatalf("a holder's renewal was not confirmed within --safety while an endpoint was silent: %v", err)
		}
	}
	var slowest time.Duration
	for n := 1; n <= silenceNewRuns; n++ {
		if n > 1 {
			next()
		}
		s := leasestore.New(open(t))
		l, sent := acquire(s, "next", fmt.Sprintf("runner-%d", n)) // a worker ID is unique per run
		took := time.Since(sent)
		slowest = max(slowest, took)
		if took > tm.NewRunWithin {
			t.Errorf("run %d, %s into the silence, was granted after %s, want within %s",
				n, sent.Sub(silenced).Round(time.Millisecond), took.Round(time.Millisecond), tm.NewRunWithin)
		}
		if l.Token <= last {
			t.Errorf("run %d got token %d, want above %d", n, l.Token, last)
		}
		last = l.Token
		ctx, cancel := context.WithTimeout(t.Context(), tm.Safety)
		err := s.Release(ctx, l, leasestore.Outcome{Result: leasestore.ResultCompleted})
		cancel()
		if err != nil {
			t.Fatalf("release of run %d: %v", n, err)
		}
	}
	next()
	t.Logf("%d runs granted while an endpoint was silent for %s; the slowest in %s",
		silenceNewRuns, time.Since(silenced).Round(time.Millisecond), slowest.Round(time.Millisecond))
	check := leasestore.New(open(t))
	for _, l := range holders {
		if st := Status(t, check, l.Job); st.State != leasestore.StateRunning || st.Holder == nil || st.Holder.Token != l.Token {
			t.Errorf("%s after the silence: %s %+v, want still held with token %d", l.Job, st.State, st.Holder, l.Token)
		}
	}
}

// renewing renews l every tm.Heartbeat as the supervisor does: each
// renewal bounded by the last confirmed one's send time (at first, the
// acquire's: granted) + tm.Safety, the deadline moving to its own send
// time + tm.Safety once it is confirmed, and one that failed because the
// store was unavailable retried after a fifth of the heartbeat until that
// deadline. It reports on lost the first renewal not confirmed in time, or
// refused, and stops when stop is closed.
func renewing(s Client, tm Silence, l *leasestore.Lease, granted time.Time, stop <-chan struct{}, lost chan<- error) {
	deadline := granted.Add(tm.Safety)
	beat := time.NewTimer(tm.Heartbeat)
	defer beat.Stop()
	for {
		select {
		case <-stop:
			return
		case <-beat.C:
		}
		sent := time.Now()
		ctx, cancel := context.WithDeadline(context.Background(), deadline)
		err := s.Renew(ctx, l)
		cancel()
		switch {
		case err == nil:
			deadline = sent.Add(tm.Safety)
			beat.Reset(time.Until(sent.Add(tm.Heartbeat)))
		case errors.Is(err, leasestore.ErrUnavailable) && time.Now().Before(deadline):
			beat.Reset(tm.Heartbeat / 5)
		default:
			lost <- err
			return
		}
	}
}

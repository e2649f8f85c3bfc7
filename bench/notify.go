//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/rs/zerolog"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/notify"
)

// notifyEvents is how many crashes the notification figures time, one at
// a time, each from the pass that counts it to its webhook's arrival.
const notifyEvents = 200

// notifyFigures times the delay from an event to its webhook delivery: a
// crash the reaper counts, on the embedded store, sent by a Deliverer
// running beside the passes (as scan --watch --notify-webhook runs it) to
// a local HTTP receiver. The reaper wakes the Deliverer when it recorded
// notices; an event a run or a command records waits for the reaper's
// next interval instead, which the figures leave out.
func (b *bench) notifyFigures() error {
	dir, err := os.MkdirTemp("", "leasectl-bench-notify-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	fs, err := filestore.Open(dir, "bench")
	if err != nil {
		return err
	}
	s := leasestore.New(fs)
	defer s.Close()

	arrived := make(chan notify.Event, notifyEvents)
	arrivedAt := make(chan time.Time, notifyEvents)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		at := time.Now()
		var e notify.Event
		body, _ := io.ReadAll(r.Body)
		if json.Unmarshal(body, &e) == nil && e.Kind == leasestore.NoticeCrash {
			arrived <- e
			arrivedAt <- at
		}
		w.WriteHeader(http.StatusNoContent)
	})}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()

	hook, err := notify.NewWebhook("http://"+ln.Addr().String()+"/hook", notify.FormatJSON, nil, "leasectl/bench")
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	d := &notify.Deliverer{Store: s, Sinks: []notify.Sink{hook}, Owner: "bench", Log: zerolog.Nop()}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); d.Run(runCtx, time.Hour) }()
	defer func() { stop(); <-done }()
	reaper := &inspect.Reaper{Store: s, RecordNotices: true, Recorded: d.Kick}

	var delays []float64
	for i := range notifyEvents {
		job := fmt.Sprintf("job-%03d", i)
		l, err := s.Acquire(ctx, leasestore.AcquireRequest{Job: job, Holder: "w", Host: "bench", TTL: time.Millisecond,
			EvidenceTTL: time.Minute, MaxCrashes: 1000})
		if err != nil {
			return err
		}
		time.Sleep(time.Until(l.GrantedAt.Add(2 * time.Millisecond))) // its liveness expires: a supervisor gone
		crashes, err := reaper.Pass(ctx)
		if err != nil || len(crashes) != 1 {
			return fmt.Errorf("pass %d: %d crashes, %v", i, len(crashes), err)
		}
		select {
		case e := <-arrived:
			delays = append(delays, ms((<-arrivedAt).Sub(e.At)))
		case <-ctx.Done():
			return fmt.Errorf("the crash of %s never reached the webhook", job)
		}
	}
	n := fmt.Sprintf("%d crashes the reaper counted on the embedded store, one at a time, to a local webhook", notifyEvents)
	line("notify_delay_p50_ms", percentile(delays, 50), "ms", "from the event (the crash counted) to its webhook's arrival; "+n)
	line("notify_delay_p99_ms", percentile(delays, 99), "ms", "the same, 99th percentile; an event a run or a command records waits for the reaper's next interval too")
	return nil
}

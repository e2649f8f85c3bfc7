package inspect

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
)

// The metrics carry each job's slots, slots in use and queue length, read
// from a real store that keeps slots and a queue (the embedded store): a
// job of three slots, all held, with two runs waiting, and a job of one
// slot held with nobody waiting.
func TestMetricsPerJobSlotsAndQueue(t *testing.T) {
	s, err := filestore.Open(t.TempDir(), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	ask := func(job, worker string, slots int) error {
		_, err := s.Acquire(context.Background(), leasestore.AcquireRequest{
			Job: job, Holder: worker, Host: "host-a", PID: 4242, Command: []string{"./encode.sh"},
			TTL: time.Hour, EvidenceTTL: time.Hour, MaxCrashes: 3, Slots: slots, Wait: true,
		})
		return err
	}
	for _, w := range []string{"a", "b", "c"} {
		if err := ask("encode", w, 3); err != nil {
			t.Fatalf("%s: %v", w, err)
		}
	}
	for _, w := range []string{"d", "e"} {
		var held *leasestore.HeldError
		if err := ask("encode", w, 3); !errors.As(err, &held) {
			t.Fatalf("%s: %v, want it refused and queued", w, err)
		}
	}
	if err := ask("nightly", "n", 1); err != nil {
		t.Fatal(err)
	}
	m := NewMetrics()
	if _, err := (&Reaper{Store: leasestore.New(s), Metrics: m}).Pass(context.Background()); err != nil {
		t.Fatal(err)
	}
	got := series(t, m)
	for name, v := range map[string]float64{
		`leasectl_job_slots{job_id="encode"}`:         3,
		`leasectl_job_slots_in_use{job_id="encode"}`:  3,
		`leasectl_job_queue_length{job_id="encode"}`:  2,
		`leasectl_job_slots{job_id="nightly"}`:        1,
		`leasectl_job_slots_in_use{job_id="nightly"}`: 1,
		`leasectl_job_queue_length{job_id="nightly"}`: 0,
	} {
		if g, ok := got[name]; !ok || g != v {
			t.Errorf("%s = %v (there: %v), want %v", name, g, ok, v)
		}
	}
}

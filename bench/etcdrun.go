//go:build linux

package main

import (
	"bufio"
	"fmt"
	"maps"
	"net/http"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"
)

// proposalRuns is how many commands each side of the durable-writes figure
// runs between two readings of etcd's proposal counter.
const proposalRuns = 50

// etcdRun is what a run costs on etcd, the two targets of issue 26 there:
// its time against `etcdctl lock`'s (etcdStartup) and the durable writes
// it makes (etcdProposals). Seconds: in the quick run.
func (b *bench) etcdRun() error {
	if b.etcd == nil {
		return nil
	}
	if err := b.etcdStartup(); err != nil {
		return fmt.Errorf("etcd: %w", err)
	}
	return b.etcdProposals()
}

// etcdStartup times `leasectl run -- true` on etcd against `etcdctl lock j
// -- true` and `flock -n`, interleaved.
func (b *bench) etcdStartup() error {
	cmds := []starter{
		b.floorCmd("flock"),
		{"etcd_lock", func() *exec.Cmd { return b.etcdctl("lock", "j", "--", "true") }},
		{"run_etcd", func() *exec.Cmd { return b.leasectlAt(b.etcdStoreURL(), "run", "--job", "j", "--", "true") }},
	}
	samples, err := b.interleave(cmds)
	if err != nil {
		return err
	}
	run, lock := median(samples["run_etcd"]), median(samples["etcd_lock"])
	line("run_etcd_ms", run, "ms", fmt.Sprintf("leasectl run --job j -- true, local single-member etcd; median of %d interleaved with etcdctl lock (%.2f ms)", startupRounds, lock))
	line("run_etcd_vs_etcd_lock", run/lock, "x", "target <= 0.8; "+floorIs("%.2f ms", lock)+" (etcdctl lock)")
	line("run_etcd_vs_flock", run/median(samples["flock"]), "x", "reference")
	return nil
}

// etcdProposals counts the raft proposals etcd commits (each a durable,
// fsynced write) per `leasectl run -- true` and per `etcdctl lock j --
// true`, from the member's own etcd_server_proposals_committed_total read
// before and after a batch of each. The bench's etcd serves nobody else
// meanwhile.
func (b *bench) etcdProposals() error {
	perRun := map[string]float64{}
	var fsync float64 // ms, the mean of the WAL's syncs over leasectl's runs
	for _, c := range []starter{
		{"leasectl", func() *exec.Cmd { return b.leasectlAt(b.etcdStoreURL(), "run", "--job", "writes", "--", "true") }},
		{"etcdctl", func() *exec.Cmd { return b.etcdctl("lock", "writes", "--", "true") }},
	} {
		// A job's first run also grants the two etcd leases its later runs
		// take over while they live (etcdstore's record): a job run again
		// and again pays them once, so the warm-up runs are not counted.
		if err := runTimes(c, warmupRounds); err != nil {
			return err
		}
		before, err := b.etcdMetrics()
		if err != nil {
			return err
		}
		if err := runTimes(c, proposalRuns); err != nil {
			return err
		}
		after, err := b.etcdMetrics()
		if err != nil {
			return err
		}
		perRun[c.name] = (after.proposals - before.proposals) / proposalRuns
		if syncs := after.fsyncs - before.fsyncs; c.name == "leasectl" && syncs > 0 {
			fsync = (after.fsyncSeconds - before.fsyncSeconds) / syncs * 1000
		}
	}
	line("etcd_writes_per_run", perRun["leasectl"], "proposals", fmt.Sprintf("target <= 2.0; raft proposals etcd committed per leasectl run --job j -- true (etcd_server_proposals_committed_total over %d runs of one job, after %d); etcdctl lock j -- true: %.2f", proposalRuns, warmupRounds, perRun["etcdctl"]))
	line("etcd_wal_fsync_ms", fsync, "ms", "reference: the mean sync of etcd's write-ahead log over those runs (etcd_disk_wal_fsync_duration_seconds); a proposal is acknowledged after one, so a run's floor on etcd is its proposals times this")
	return nil
}

// runTimes runs c's command n times, each to its end.
func runTimes(c starter, n int) error {
	for range n {
		if out, err := c.cmd().CombinedOutput(); err != nil {
			return fmt.Errorf("%s: %v: %s", c.name, err, out)
		}
	}
	return nil
}

// etcdCounters are the bench etcd's counters that etcdProposals reads.
type etcdCounters struct {
	proposals            float64 // etcd_server_proposals_committed_total
	fsyncs, fsyncSeconds float64 // etcd_disk_wal_fsync_duration_seconds' count and sum
}

// metricsClient reads etcd's /metrics, bounded so that a member that does
// not answer fails the bench rather than hangs it.
var metricsClient = &http.Client{Timeout: 10 * time.Second}

// etcdMetrics reads etcdCounters at the bench etcd's /metrics.
func (b *bench) etcdMetrics() (etcdCounters, error) {
	resp, err := metricsClient.Get(b.etcdURL + "/metrics")
	if err != nil {
		return etcdCounters{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return etcdCounters{}, fmt.Errorf("%s/metrics: %s", b.etcdURL, resp.Status)
	}
	var c etcdCounters
	fields := map[string]*float64{
		"etcd_server_proposals_committed_total":      &c.proposals,
		"etcd_disk_wal_fsync_duration_seconds_count": &c.fsyncs,
		"etcd_disk_wal_fsync_duration_seconds_sum":   &c.fsyncSeconds,
	}
	found := 0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if into := fields[name]; ok && into != nil {
			if *into, err = strconv.ParseFloat(strings.TrimSpace(value), 64); err != nil {
				return etcdCounters{}, fmt.Errorf("%s/metrics: %s: %w", b.etcdURL, name, err)
			}
			found++
		}
	}
	if err := sc.Err(); err != nil {
		return etcdCounters{}, err
	}
	if found < len(fields) {
		return etcdCounters{}, fmt.Errorf("%s/metrics: %d of the counters %v", b.etcdURL, found, slices.Collect(maps.Keys(fields)))
	}
	return c, nil
}

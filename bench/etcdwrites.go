//go:build linux

package main

import (
	"bufio"
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
)

// proposalRuns is how many commands each side of the durable-writes figure
// runs between two readings of etcd's proposal counter.
const proposalRuns = 50

// etcdProposals counts the raft proposals etcd commits (each a durable,
// fsynced write) per `leasectl run -- true` and per `etcdctl lock j --
// true`, from the member's own etcd_server_proposals_committed_total read
// before and after a batch of each. The bench's etcd serves nobody else
// meanwhile. A few seconds: in the quick run.
func (b *bench) etcdProposals() error {
	if b.etcd == nil {
		return nil
	}
	perRun := map[string]float64{}
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
		before, err := b.etcdCommitted()
		if err != nil {
			return err
		}
		if err := runTimes(c, proposalRuns); err != nil {
			return err
		}
		after, err := b.etcdCommitted()
		if err != nil {
			return err
		}
		perRun[c.name] = (after - before) / proposalRuns
	}
	line("etcd_writes_per_run", perRun["leasectl"], "proposals", fmt.Sprintf("target <= 2.0; raft proposals etcd committed per leasectl run --job j -- true (etcd_server_proposals_committed_total over %d runs of one job, after %d); etcdctl lock j -- true: %.2f", proposalRuns, warmupRounds, perRun["etcdctl"]))
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

// etcdCommitted reads etcd_server_proposals_committed_total at the bench
// etcd's /metrics.
func (b *bench) etcdCommitted() (float64, error) {
	resp, err := http.Get(b.etcdURL + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "etcd_server_proposals_committed_total "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	if err := sc.Err(); err != nil {
		return 0, err
	}
	return 0, fmt.Errorf("%s/metrics: no etcd_server_proposals_committed_total", b.etcdURL)
}

//go:build linux

package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/redistest"
)

// The Redis deployments that survive a node loss: a primary with two
// replicas and three sentinels, and a cluster of three primaries with a
// replica each, each with and without min_replicas=1.

// topologyTimeout bounds the topology figures' store work (seeding the scan).
const topologyTimeout = 3 * time.Minute

// topology is one deployment the figures run against.
type topology struct {
	name string
	url  string
	// killPrimary SIGKILLs the primary holding job's keys and returns it.
	killPrimary func(job string) (*redistest.Server, error)
}

// topologies measures, on Sentinel and Cluster: run -- true with and
// without min_replicas=1 interleaved with the single Redis, handoff with
// --wait, the time from a primary's SIGKILL until a new run's child starts,
// and on the cluster the scan of 100,000 in-flight jobs spread over three
// primaries.
func (b *bench) topologies() error {
	sentinel, err := redistest.StartSentinel(redistest.SentinelOptions{})
	if err != nil {
		return err
	}
	defer sentinel.Stop()
	cluster, err := redistest.StartCluster(redistest.ClusterOptions{Replicas: 1, Args: []string{"--cluster-node-timeout", "1000"}})
	if err != nil {
		return err
	}
	defer cluster.Stop()
	clusterURL := "redis+cluster://" + strings.TrimPrefix(cluster.URL(), "redis://")
	tops := []topology{
		{"sentinel", sentinel.URL(), func(string) (*redistest.Server, error) {
			p, err := sentinel.Primary()
			if err != nil {
				return nil, err
			}
			return p, p.Kill()
		}},
		{"cluster", clusterURL, func(job string) (*redistest.Server, error) {
			return killClusterPrimaryOf(cluster, "bench:*"+job+"*")
		}},
	}
	cmds := []starter{{"run_redis", func() *exec.Cmd { return b.leasectlCmd(true, "run", "--job", "j", "--", "true") }}}
	for _, t := range tops {
		for _, v := range []struct{ suffix, query string }{{"", ""}, {"_min1", "&min_replicas=1"}} {
			url := t.url + v.query
			cmds = append(cmds, starter{"run_" + t.name + v.suffix, func() *exec.Cmd { return b.leasectlAt(url, "run", "--job", "j", "--", "true") }})
		}
	}
	samples, err := b.interleave(cmds)
	if err != nil {
		return err
	}
	redis := median(samples["run_redis"])
	for _, c := range cmds[1:] {
		m := median(samples[c.name])
		line(c.name+"_ms", m, "ms", fmt.Sprintf("leasectl run --job j -- true; %.2fx the single Redis (%.2f ms) in the same rounds", m/redis, redis))
	}
	for _, t := range tops {
		if err := b.topologyHandoff(t); err != nil {
			return fmt.Errorf("%s handoff: %w", t.name, err)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), topologyTimeout)
	defer cancel()
	if err := b.scan(ctx, clusterURL, "leasectl", "scan_cluster", nil); err != nil {
		return fmt.Errorf("cluster scan: %w", err)
	}
	for _, t := range tops {
		if err := b.primaryFailover(t); err != nil {
			return fmt.Errorf("%s failover: %w", t.name, err)
		}
	}
	return nil
}

// topologyHandoff times holder's child end → waiter's child start with
// --wait and min_replicas=1 on t.
func (b *bench) topologyHandoff(t topology) error {
	name := "handoff_" + t.name
	samples, err := b.handoffRuns(handoffRounds/3, b.leasectlHandoff(name, t.url+"&min_replicas=1"))
	if err != nil {
		return err
	}
	s := samples[name]
	line(name+"_ms", median(s), "ms", fmt.Sprintf("with min_replicas=1; median of %d", len(s)))
	return nil
}

// primaryFailover times SIGKILL of the primary holding a running lease →
// the child of a new run of another job on the same shard starts: how long
// the deployment grants nothing. The new run is retried until it gets its
// lease, as a cron entry's next run would.
func (b *bench) primaryFailover(t topology) error {
	var s []float64
	for range faultRounds {
		d, err := b.primaryFailoverOnce(t)
		if err != nil {
			return err
		}
		s = append(s, d)
	}
	line("failover_"+t.name+"_ms", median(s), "ms", fmt.Sprintf(
		"primary SIGKILLed → a new run's child starts; down-after/node timeout 1 s; median of %d, max %.0f", faultRounds, maxOf(s)))
	return nil
}

func (b *bench) primaryFailoverOnce(t topology) (float64, error) {
	job := "failover-" + strconv.Itoa(b.next())
	// The deployment may still be settling from the previous round's
	// failover: the first run, too, is retried until it succeeds.
	if err := b.runUntilOK(t.url, job, "true"); err != nil {
		return 0, err
	}
	killed := mono()
	victim, err := t.killPrimary(job)
	if err != nil {
		return 0, err
	}
	file := b.file("failover")
	if err := b.runUntilOK(t.url, job, b.stamp, "start", file); err != nil {
		return 0, fmt.Errorf("after the primary was killed: %w", err)
	}
	started, err := readStamp(file)
	if err != nil {
		return 0, err
	}
	return float64(started-killed) / 1e6, rejoin(victim)
}

// runUntilOK runs job with command on the store at url again and again
// until a run succeeds, or fails after topologyTimeout.
func (b *bench) runUntilOK(url, job string, command ...string) error {
	deadline := time.Now().Add(topologyTimeout)
	for {
		out, err := b.leasectlAt(url, append([]string{"run", "--job", job, "--"}, command...)...).CombinedOutput()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("no run succeeded in %s; the last: %v: %s", topologyTimeout, err, out)
		}
	}
}

// killClusterPrimaryOf SIGKILLs the cluster primary holding a key that
// matches pattern.
func killClusterPrimaryOf(c *redistest.Cluster, pattern string) (*redistest.Server, error) {
	for _, n := range append(append([]*redistest.Server{}, c.Masters...), c.Replicas...) {
		info, err := n.Do("INFO", "replication")
		if err != nil || !strings.Contains(info, "role:master") {
			continue
		}
		if keys, err := n.Do("KEYS", pattern); err == nil && keys != "" {
			return n, n.Kill()
		}
	}
	return nil, fmt.Errorf("no primary holds a key matching %q", pattern)
}

// rejoin restarts a killed primary, empty, and waits until it has rejoined
// as a replica in sync, so that the next round's failover has a replica to
// promote.
func rejoin(s *redistest.Server) error {
	if err := s.Restart(); err != nil {
		return err
	}
	deadline := time.Now().Add(topologyTimeout)
	for {
		info, err := s.Do("INFO", "replication")
		if err == nil && strings.Contains(info, "role:slave") && strings.Contains(info, "master_link_status:up") {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s has not rejoined as a replica after %s", s.Addr, topologyTimeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

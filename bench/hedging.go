//go:build linux

package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/etcdstore"
)

// hedgeRenewals is how many renewals each client makes, interleaved with
// the other's, for the renewal latency with one endpoint and with three.
const hedgeRenewals = 2000

// etcdHedging measures what hedging across endpoints (leasestore/failover)
// adds on a healthy store: a 3-member etcd given as its leader alone, and
// as all three members with the leader first (the same member serves
// both; what differs is the client's endpoint list, its order and its
// notes of silent members), interleaved: `run -- true`, and Renew's
// latency.
func (b *bench) etcdHedging() error {
	if b.etcd == nil {
		return nil // etcd is not installed: the etcd group said so
	}
	c, err := etcdtest.StartCluster(etcdtest.Options{Members: 3})
	if err != nil {
		return err
	}
	defer c.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	leader, err := c.Leader(ctx)
	if err != nil {
		return err
	}
	hosts := []string{strings.TrimPrefix(leader.ClientURL, "http://")}
	for _, m := range c.Members {
		if m != leader {
			hosts = append(hosts, strings.TrimPrefix(m.ClientURL, "http://"))
		}
	}
	one, three := "etcd://"+hosts[0], "etcd://"+strings.Join(hosts, ",")
	cmds := []starter{
		{"one", func() *exec.Cmd { return b.leasectlAt(one, "run", "--job", "hedge-one", "--", "true") }},
		{"three", func() *exec.Cmd { return b.leasectlAt(three, "run", "--job", "hedge-three", "--", "true") }},
	}
	runs := map[string][]float64{}
	for round := range warmupRounds + startupRounds {
		for _, i := range b.rng.Perm(len(cmds)) {
			start := time.Now()
			if out, err := cmds[i].cmd().CombinedOutput(); err != nil {
				return fmt.Errorf("run on %s endpoint(s): %v: %s", cmds[i].name, err, out)
			}
			if round >= warmupRounds {
				runs[cmds[i].name] = append(runs[cmds[i].name], ms(time.Since(start)))
			}
		}
	}
	renewals, err := b.renewLatencies(ctx, map[string]string{"one": one, "three": three})
	if err != nil {
		return err
	}
	runOne, runThree := median(runs["one"]), median(runs["three"])
	line("hedging_run_etcd_3_endpoints_ms", runThree, "ms", fmt.Sprintf(
		"leasectl run -- true on a 3-member etcd given all three members, leader first; the leader alone: %.2f ms; median of %d, interleaved", runOne, startupRounds))
	line("hedging_run_added_ms", runThree-runOne, "ms", fmt.Sprintf(
		"the difference; target: none measurable, within the runs' spread (p25-p75 with the leader alone: %.2f-%.2f ms)",
		percentile(runs["one"], 25), percentile(runs["one"], 75)))
	p99One, p99Three := percentile(renewals["one"], 99), percentile(renewals["three"], 99)
	line("hedging_renew_p99_3_endpoints_ms", p99Three, "ms", fmt.Sprintf(
		"Renew on the same etcd given all three members; the leader alone: p99 %.2f ms (p50 %.2f and %.2f); %d each, interleaved",
		p99One, percentile(renewals["one"], 50), percentile(renewals["three"], 50), hedgeRenewals))
	line("hedging_renew_p99_ratio", p99Three/p99One, "x", "target: 1 (renew p99 unchanged)")
	return nil
}

// renewLatencies acquires a lease through a client of each URL and renews
// it hedgeRenewals times, the clients taking turns, and returns each one's
// latencies (ms) by name.
func (b *bench) renewLatencies(ctx context.Context, urls map[string]string) (map[string][]float64, error) {
	type client struct {
		name  string
		store *etcdstore.Store
		lease *leasestore.Lease
	}
	var clients []client
	for name, url := range urls {
		s, err := etcdstore.Open(url, "hedging")
		if err != nil {
			return nil, err
		}
		defer s.Close()
		l, err := s.Acquire(ctx, request("renew-"+name, time.Hour, 3))
		if err != nil {
			return nil, err
		}
		clients = append(clients, client{name, s, l})
	}
	lat := map[string][]float64{}
	for range hedgeRenewals {
		for _, i := range b.rng.Perm(len(clients)) {
			c := clients[i]
			start := time.Now()
			if err := c.store.Renew(ctx, c.lease); err != nil {
				return nil, fmt.Errorf("renew on %s endpoint(s): %w", c.name, err)
			}
			lat[c.name] = append(lat[c.name], ms(time.Since(start)))
		}
	}
	return lat, nil
}

//go:build linux

package main

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/leasectl/leasectl/internal/pgtest"
	"github.com/leasectl/leasectl/leasestore"
)

// pgStoreJobs is how many jobs the PostgreSQL size figures are taken over.
const pgStoreJobs = 5_000

// postgres measures the PostgreSQL store's figures (issue 14): run -- true
// against Redis interleaved, handoff, failover, fail-fast, scan at scale,
// table bytes per job, and the package init the driver adds. It starts a
// PostgreSQL of its own (fsync off, as the bench's Redis runs without
// persistence; SCRAM passwords on TCP, as Debian's default), and another
// for the store figures, so that nothing else's rows count.
func (b *bench) postgres() error {
	srv, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		fmt.Printf("# PostgreSQL skipped: %v\n", err)
		return nil
	}
	defer srv.Stop()
	p := &pgBench{bench: b, srv: srv, url: srv.URL, preferURL: srv.PreferURL()}
	q := url.Values{"host": {srv.SocketDir}, "port": {strconv.Itoa(srv.Port)}, "user": {pgtest.Superuser}}
	p.socketURL = "postgres:///postgres?" + q.Encode()
	for _, step := range []func() error{p.init, p.startup, p.handoff, p.failover, p.failFast, p.storeFigures} {
		if err := step(); err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
	}
	return nil
}

// pgBench is the PostgreSQL part of a bench run.
type pgBench struct {
	*bench
	srv       *pgtest.Server
	url       string // TCP, SCRAM password
	preferURL string // same with sslmode=prefer, libpq's default: the server has no TLS
	socketURL string // Unix socket, no password
}

// init sums the package init of `leasectl version` that the PostgreSQL
// driver brings (pgx's packages and what only they import), from
// GODEBUG=inittrace=1, median of startupRounds runs.
func (p *pgBench) init() error {
	var driver, total []float64
	for range startupRounds {
		cmd := p.leasectlCmd(false, "version")
		cmd.Env = append(cmd.Env, "GODEBUG=inittrace=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			return fmt.Errorf("leasectl version: %v: %s", err, out)
		}
		var d, t float64
		for _, l := range strings.Split(string(out), "\n") {
			f := strings.Fields(l)
			if len(f) < 5 || f[0] != "init" {
				continue
			}
			ms, err := strconv.ParseFloat(f[4], 64)
			if err != nil {
				continue
			}
			t += ms
			if pgxPackage(f[1]) {
				d += ms
			}
		}
		driver, total = append(driver, d), append(total, t)
	}
	line("init_postgres_driver_ms", median(driver), "ms", fmt.Sprintf(
		"package init of pgconn and what it alone imports, in leasectl version (GODEBUG=inittrace=1); budget 0.3; all packages: %.3f", median(total)))
	return nil
}

// pgxPackage reports whether pkg is linked into leasectl only for the
// PostgreSQL driver.
func pgxPackage(pkg string) bool {
	for _, prefix := range []string{"github.com/jackc/", "golang.org/x/text/", "encoding/xml", "database/sql",
		"github.com/leasectl/leasectl/leasestore/pgstore"} {
		if strings.HasPrefix(pkg, prefix) {
			return true
		}
	}
	return false
}

// startup times `leasectl run --job j -- true` on PostgreSQL (TCP with a
// SCRAM password, without and with sslmode=prefer, and the Unix socket)
// and on Redis, interleaved.
func (p *pgBench) startup() error {
	if out, err := p.leasectlAt(p.url, "store", "migrate").CombinedOutput(); err != nil {
		return fmt.Errorf("store migrate: %v: %s", err, out)
	}
	cmds := []starter{
		{"run_redis", func() *exec.Cmd { return p.leasectlCmd(true, "run", "--job", "j", "--", "true") }},
		{"run_postgres", func() *exec.Cmd { return p.leasectlAt(p.url, "run", "--job", "j", "--", "true") }},
		{"run_postgres_socket", func() *exec.Cmd { return p.leasectlAt(p.socketURL, "run", "--job", "j", "--", "true") }},
		{"run_postgres_prefer", func() *exec.Cmd { return p.leasectlAt(p.preferURL, "run", "--job", "j", "--", "true") }},
	}
	bouncer, err := p.srv.StartPgBouncer()
	switch {
	case errors.Is(err, pgtest.ErrNoPgBouncer):
		fmt.Printf("# run_postgres_pgbouncer skipped: %v\n", err)
	case err != nil:
		return err
	default:
		defer bouncer.Stop()
		cmds = append(cmds, starter{"run_postgres_pgbouncer", func() *exec.Cmd { return p.leasectlAt(bouncer.URL, "run", "--job", "j", "--", "true") }})
	}
	samples := map[string][]float64{}
	for round := range warmupRounds + startupRounds {
		for _, i := range p.rng.Perm(len(cmds)) {
			c := cmds[i]
			start := time.Now()
			if out, err := c.cmd().CombinedOutput(); err != nil {
				return fmt.Errorf("%s: %v: %s", c.name, err, out)
			}
			if round >= warmupRounds {
				samples[c.name] = append(samples[c.name], ms(time.Since(start)))
			}
		}
	}
	med := func(name string) float64 { return median(samples[name]) }
	n := fmt.Sprintf("median of %d runs interleaved with Redis's", startupRounds)
	line("run_postgres_ms", med("run_postgres"), "ms", "leasectl run --job j -- true, local PostgreSQL over TCP, SCRAM password; "+n)
	line("run_postgres_socket_ms", med("run_postgres_socket"), "ms", "same over the Unix socket, no password")
	line("run_postgres_prefer_ms", med("run_postgres_prefer"), "ms", "same over TCP with sslmode=prefer (the default) and a server without TLS: asked on the run's one connection")
	line("run_postgres_vs_redis", med("run_postgres")/med("run_redis"), "x", fmt.Sprintf("target <= 1.5; Redis %.2f ms in the same rounds", med("run_redis")))
	line("run_postgres_socket_vs_redis", med("run_postgres_socket")/med("run_redis"), "x", "reference")
	if bouncer != nil {
		line("run_postgres_pgbouncer_ms", med("run_postgres_pgbouncer"), "ms", "same through PgBouncer, transaction pooling, SCRAM password: no backend to start, warm sessions")
		line("run_postgres_pgbouncer_vs_redis", med("run_postgres_pgbouncer")/med("run_redis"), "x", "target <= 1.5")
	}
	return nil
}

// handoff times the holder's child end → the waiter's child start with
// --wait on PostgreSQL: the release's NOTIFY wakes the waiter.
func (p *pgBench) handoff() error {
	samples, err := p.handoffRuns(handoffRounds, p.leasectlHandoff("handoff_postgres", p.url))
	if err != nil {
		return err
	}
	s := samples["handoff_postgres"]
	line("handoff_postgres_ms", median(s), "ms", fmt.Sprintf("target <= 10; LISTEN/NOTIFY; median of %d, max %.1f", handoffRounds, maxOf(s)))
	return nil
}

// failover times SIGKILL of the holder's supervisor → the waiter's child
// starts, woken at the holder's expiry.
func (p *pgBench) failover() error {
	s, err := p.repeat(faultRounds, func() (float64, error) { return p.failoverOnce(defaultFaults(p.url), faultTTL) })
	if err != nil {
		return fmt.Errorf("failover: %w", err)
	}
	line("failover_postgres_ms", median(s), "ms", fmt.Sprintf("target <= ttl + 100 = %.0f; ttl %s; median of %d, max %.1f",
		ms(faultTTL+100*time.Millisecond), faultTTL, faultRounds, maxOf(s)))
	return nil
}

// failFast times a PostgreSQL freeze (SIGSTOP of every server process) →
// the holder's child dies.
func (p *pgBench) failFast() error {
	s, err := p.repeat(faultRounds, func() (float64, error) { return p.failFastOnce(defaultFaults(p.url), p.srv.Freeze, p.srv.Thaw) })
	if err != nil {
		return fmt.Errorf("fail-fast: %w", err)
	}
	line("failfast_postgres_ms", median(s), "ms", fmt.Sprintf(
		"child death - PostgreSQL freeze; bound: last confirmed renewal's send + safety + 50 = send + %.0f; safety %s; median of %d, max %.1f",
		ms(faultSafety+50*time.Millisecond), faultSafety, faultRounds, maxOf(s)))
	return nil
}

// storeFigures measures Scan at scale and the tables' bytes per job on a
// server of their own.
func (p *pgBench) storeFigures() error {
	srv, err := pgtest.Start(pgtest.Options{})
	if err != nil {
		return err
	}
	defer srv.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 2*storeTimeout)
	defer cancel()
	if err := p.size(ctx, srv); err != nil {
		return fmt.Errorf("size: %w", err)
	}
	vacuum := func() error { return srv.Exec(`VACUUM ANALYZE "scan".jobs, "scan".runs, "scan".history`) }
	if err := p.scan(ctx, srv.URL, "scan", "scan_postgres", vacuum); err != nil {
		return fmt.Errorf("scan: %w", err)
	}
	return nil
}

// size measures the bytes of the namespace's tables and indexes per job at
// rest (record and a full history) and what a job in flight adds (its
// run), from pg_total_relation_size after VACUUM FULL, which leaves live
// rows only: between vacuums, dead row versions add to it.
func (p *pgBench) size(ctx context.Context, srv *pgtest.Server) error {
	const ns = "size"
	rested, running, err := restAndFlight(ctx, srv.URL, ns, pgStoreJobs, func() (int64, error) { return tableBytes(srv, ns) })
	if err != nil {
		return err
	}
	n := fmt.Sprintf("pg_total_relation_size of the tables after VACUUM FULL, over %d jobs", pgStoreJobs)
	line("postgres_bytes_per_inflight_job", float64(running-rested)/pgStoreJobs, "bytes", "the run's row and index entries; "+n)
	line("postgres_bytes_per_job_at_rest", float64(rested)/pgStoreJobs, "bytes", fmt.Sprintf("record + history of %d events; %s", leasestore.HistoryLimit, n))
	return nil
}

// tableBytes is the size of namespace's tables with their indexes, after
// VACUUM FULL.
func tableBytes(srv *pgtest.Server, namespace string) (int64, error) {
	s := `"` + namespace + `"`
	if err := srv.Exec(fmt.Sprintf("VACUUM FULL %s.jobs, %[1]s.runs, %[1]s.history", s)); err != nil {
		return 0, err
	}
	rows, err := srv.Query(fmt.Sprintf("SELECT pg_total_relation_size('%s.jobs') + pg_total_relation_size('%[1]s.runs') + pg_total_relation_size('%[1]s.history')", s))
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 {
		return 0, fmt.Errorf("no size of the tables of %s", namespace)
	}
	return strconv.ParseInt(rows[0][0], 10, 64)
}

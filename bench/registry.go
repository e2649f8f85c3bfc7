//go:build linux

package main

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/internal/testcert"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/httpstore"
	"github.com/leasectl/leasectl/leasestore/redisstore"
)

// The registry's load (issues 16 and 26): registryWorkers simulated
// workers, each with a connection of its own as every `leasectl run` has,
// heartbeating through one `leasectl serve` over TLS in front of the
// bench's Redis: a fleet of 1,000 hosts running 10 leased jobs each.
const (
	registryWorkers   = 10000
	registryHeartbeat = 10 * time.Second // the target's heartbeat
	// registryFlooders of the workers renew back to back: enough to keep
	// every core of serve busy; the other workers would only add clients
	// competing with serve for the same 2 cores.
	registryFlooders = 1000
	// registryPerRedis workers share one direct Redis store: a connection
	// each would pass Redis's 10,000 clients.
	registryPerRedis = 10
	// registryConnecting workers connect at once: ten thousand TLS
	// handshakes at the same instant would outlast serve's 5 s for a
	// request's headers on 2 cores, which a fleet's staggered starts never
	// ask of it.
	registryConnecting = 500
	// registryWindow is how long the paced phases last: two heartbeats of
	// every worker.
	registryWindow = 2 * registryHeartbeat
	// The workers renew back to back for registryFlood, registryFloods
	// times, to find what one serve answers at most; the median round is
	// reported, since a 2-core machine shared with other work is noisy.
	registryFlood     = 3 * time.Second
	registryFloods    = 3
	registryNamespace = "bench-registry"
	// registryPool is the Redis connections serve keeps (?pool_size=), as
	// the README advises for a registry: a supervisor's 4 would queue the
	// back-to-back renewals of a thousand workers.
	registryPool  = 32
	registryToken = "bench-worker-token-0123456789abcdef"
)

// registryFigures measures, with registryWorkers workers: renewals paced at
// one per worker per registryHeartbeat, straight on Redis and then through
// serve (p50, p99, and the difference at p50: what the registry adds);
// serve's CPU and resident memory meanwhile; and renewals back to back
// through serve by registryFlooders of them (requests a second, p50, p99,
// CPU time a renewal). Those through serve are measured through the
// registry's floor too (bench/tlsfloor): a bare net/http server over TLS
// with the same certificates, answering each request with a canned answer
// and doing no store work. Each target's line names the floor of this run:
// what serve costs above it is leasectl's own.
//
// The floor's phases follow serve's, with a fleet of their own. Two fleets
// connected at once would need more descriptors than this process may
// usually open (10,000 connections each); and serve's phases, first, run as
// they did before the floor was measured. Serve is stopped and its fleet
// gone before the floor's fleet connects, so that each server shares the
// machine with its own workers only (and, for serve, Redis).
func (b *bench) registryFigures() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	serve := &registryServer{name: "serve"}
	directLat, certs, err := b.serveFigures(ctx, serve)
	if err != nil {
		return err
	}
	floor := &registryServer{name: "the floor"}
	if err := b.floorFigures(ctx, floor, certs, serve.leases[0]); err != nil {
		return err
	}
	printRegistry(directLat, serve, floor)
	return nil
}

// serveFigures starts serve in front of the bench's Redis, connects s's
// fleet to it, renews the fleet's leases paced straight on Redis, and
// measures s (measure). It returns the latencies straight on Redis (ms) and
// serve's certificates, and stops serve.
func (b *bench) serveFigures(ctx context.Context, s *registryServer) ([]float64, testcert.Files, error) {
	srv, url, certs, err := b.startServe("registry", b.redis.URL+"?pool_size="+strconv.Itoa(registryPool))
	if err != nil {
		return nil, certs, err
	}
	defer stopServer(srv)
	s.pid = srv.Process.Pid
	defer s.close()
	if err := s.connect(ctx, url, certs.CA); err != nil {
		return nil, certs, err
	}
	direct := make([]*leasestore.Store, registryWorkers)
	for i := range registryWorkers {
		if i%registryPerRedis != 0 {
			direct[i] = direct[i-i%registryPerRedis]
			continue
		}
		d, err := redisstore.Open(b.redis.URL, registryNamespace)
		if err != nil {
			return nil, certs, err
		}
		direct[i] = leasestore.New(d)
		defer direct[i].Close()
	}
	directLat, _, err := paced(ctx, direct, s.leases)
	if err != nil {
		return nil, certs, fmt.Errorf("renewing on Redis: %w", err)
	}
	return directLat, certs, s.measure(ctx, b.redis.PID())
}

// floorFigures starts the registry's floor with serve's certificates
// (certs), answering as serve answered a worker's acquire with l, connects
// s's fleet to it and measures s (measure), and stops the floor.
func (b *bench) floorFigures(ctx context.Context, s *registryServer, certs testcert.Files, l *leasestore.Lease) error {
	answers, err := floorAnswers(l, registryRequest(0))
	if err != nil {
		return err
	}
	cmd, url, err := b.startFloor(certs, answers)
	if err != nil {
		return err
	}
	defer stopServer(cmd)
	s.pid = cmd.Process.Pid
	defer s.close()
	if err := s.connect(ctx, url, certs.CA); err != nil {
		return err
	}
	return s.measure(ctx, b.redis.PID())
}

// printRegistry prints the registry's figures: renewals straight on Redis
// (directLat), through serve, and through the floor, named in each target's
// comment.
func printRegistry(directLat []float64, serve, floor *registryServer) {
	n := fmt.Sprintf("%d workers, each its own connection to serve (%d share each direct Redis connection)", registryWorkers, registryPerRedis)
	dp50, rp50, fp50 := percentile(directLat, 50), percentile(serve.paced.lat, 50), percentile(floor.paced.lat, 50)
	med, floorMed := serve.flooded.median(), floor.flooded.median()
	line("registry_direct_renew_p50_ms", dp50, "ms", fmt.Sprintf("Renew straight on Redis, one every %s per worker, %s; p99 %.2f ms", registryHeartbeat, n, percentile(directLat, 99)))
	line("registry_renew_p50_ms", rp50, "ms", fmt.Sprintf("the same through leasectl serve (HTTP/1.1 over TLS, Redis pool_size=%d)", registryPool))
	line("registry_renew_p99_ms", percentile(serve.paced.lat, 99), "ms", "target <= 5; "+floorIs("%.2f ms", percentile(floor.paced.lat, 99)))
	line("registry_added_p50_ms", rp50-dp50, "ms", "target <= 1; what the registry adds over the store it fronts, at p50; "+floorIs("%.2f ms", fp50)+", a round trip to it")
	line("registry_paced_rps", serve.paced.rps(), "req/s", fmt.Sprintf("%d workers with a %s heartbeat", registryWorkers, registryHeartbeat))
	line("registry_paced_cpu_percent", serve.paced.cpuPercent, "%", "target <= 25; serve's CPU time over the paced window, in % of one core; "+floorIs("%.2f%%", floor.paced.cpuPercent))
	line("registry_paced_rss_mb", serve.paced.rss, "MB", fmt.Sprintf("target <= 200; serve's peak resident memory (VmHWM) with %d workers connected and heartbeating; %s", registryWorkers, floorIs("%.2f MB", floor.paced.rss)))
	line("registry_max_rps", med.rps, "req/s", fmt.Sprintf("target >= 15000 on 2 cores; %d workers renewing back to back through one serve, median of %d rounds of %s (%s); %s",
		registryFlooders, registryFloods, registryFlood, serve.flooded.spread(), floorIs("%.0f req/s", floorMed.rps)))
	line("registry_max_p50_ms", percentile(med.lat, 50), "ms", fmt.Sprintf("back to back, the median round; p99 %.2f ms", percentile(med.lat, 99)))
	line("registry_max_rss_mb", serve.flooded.rss, "MB", "the same after the back-to-back renewals")
	used := serve.flooded.perRenewal()
	line("registry_max_serve_cpu_us", used.serve, "us", "serve's CPU time a renewal back to back, over every round: steadier than the rate on a busy machine")
	line("registry_max_redis_cpu_us", used.redis, "us", "Redis's")
	line("registry_max_clients_cpu_us", used.clients, "us", "the bench's workers' (each its own TLS connection, as every run has)")
	line("registry_max_ceiling_rps", serve.flooded.ceiling(), "req/s", fmt.Sprintf("what 2 idle cores give at most at %.0f us of CPU a renewal (serve, Redis and the workers); 15,000/s needs at most 133; %s",
		used.total(), floorIs("%.0f req/s", floor.flooded.ceiling())))

	floorUsed := floor.flooded.perRenewal()
	line("registry_floor_renew_p50_ms", fp50, "ms", "the floor: the same renewals through a bare net/http server over TLS (bench/tlsfloor) with canned answers and no store")
	line("registry_floor_renew_p99_ms", percentile(floor.paced.lat, 99), "ms", "the same, 99th percentile")
	line("registry_floor_paced_cpu_percent", floor.paced.cpuPercent, "%", "the floor's CPU time over its paced window, in % of one core")
	line("registry_floor_paced_rss_mb", floor.paced.rss, "MB", fmt.Sprintf("the floor's VmHWM with %d workers connected and heartbeating: what net/http and TLS hold for them", registryWorkers))
	line("registry_floor_max_rps", floorMed.rps, "req/s", fmt.Sprintf("back to back through the floor, median round (%s); p50 %.2f ms", floor.flooded.spread(), percentile(floorMed.lat, 50)))
	line("registry_floor_max_rss_mb", floor.flooded.rss, "MB", "the same after the back-to-back renewals")
	line("registry_floor_serve_cpu_us", floorUsed.serve, "us", "the floor's CPU time an answer back to back, over every round")
	line("registry_floor_clients_cpu_us", floorUsed.clients, "us", "the workers' against the floor")
}

// registryServer is a server the workers renew through, serve or the floor:
// its fleet of registryWorkers workers, each a store with a connection of
// its own, and what it measured.
type registryServer struct {
	name    string // in errors
	pid     int
	stores  []*leasestore.Store
	leases  []*leasestore.Lease
	paced   pacedFigures
	flooded floodFigures
}

// pacedFigures are a server's paced window: the renewals' latencies (ms), how
// long the window took, the server's CPU over it in % of one core, and its
// VmHWM after it (MB).
type pacedFigures struct {
	lat        []float64
	window     time.Duration
	cpuPercent float64
	rss        float64
}

func (p pacedFigures) rps() float64 { return float64(len(p.lat)) / p.window.Seconds() }

// floodFigures are a server's back-to-back rounds, the CPU times used over
// them all, the renewals answered, and its VmHWM after them (MB).
type floodFigures struct {
	rounds   []round
	used     cpuShares
	renewals int
	rss      float64
}

// round is one back-to-back round: the renewals' latencies (ms) and their
// rate.
type round struct {
	lat []float64
	rps float64
}

// registryRequest is worker i's acquire.
func registryRequest(i int) leasestore.AcquireRequest {
	return request(fmt.Sprintf("load-%05d", i), time.Minute, 3)
}

// connect opens the fleet's stores at url, trusting the CA in ca, and
// acquires each worker's lease, registryConnecting workers at a time.
func (s *registryServer) connect(ctx context.Context, url, ca string) error {
	s.stores = make([]*leasestore.Store, registryWorkers)
	s.leases = make([]*leasestore.Lease, registryWorkers)
	for i := range registryWorkers {
		d, err := httpstore.Open(url, registryNamespace, httpstore.Options{Token: registryToken, CAFile: ca})
		if err != nil {
			return err
		}
		s.stores[i] = leasestore.New(d)
	}
	for lo := 0; lo < registryWorkers; lo += registryConnecting {
		err := forWorkers(min(registryConnecting, registryWorkers-lo), func(i int) error {
			var err error
			s.leases[lo+i], err = s.stores[lo+i].Acquire(ctx, registryRequest(lo+i))
			return err
		})
		if err != nil {
			return fmt.Errorf("acquiring the workers' leases through %s: %w", s.name, err)
		}
	}
	return nil
}

// close closes the fleet's stores, and lets them go.
func (s *registryServer) close() {
	for _, st := range s.stores {
		if st != nil {
			_ = st.Close()
		}
	}
	s.stores = nil
}

// measure renews the fleet's leases through s paced (pace), then back to
// back for registryFloods rounds (floodRound, with Redis's pid redis), and
// reads the server's VmHWM after them.
func (s *registryServer) measure(ctx context.Context, redis int) error {
	if err := s.pace(ctx); err != nil {
		return err
	}
	for range registryFloods {
		if err := s.floodRound(ctx, redis); err != nil {
			return err
		}
	}
	var err error
	s.flooded.rss, err = vmHWM(s.pid)
	return err
}

// pace renews every worker's lease through s as paced does, reading the
// server's CPU time over the window and its VmHWM after it.
func (s *registryServer) pace(ctx context.Context) error {
	cpu0, err := procCPU(s.pid)
	if err != nil {
		return err
	}
	lat, window, err := paced(ctx, s.stores, s.leases)
	if err != nil {
		return fmt.Errorf("renewing through %s: %w", s.name, err)
	}
	cpu1, err := procCPU(s.pid)
	if err != nil {
		return err
	}
	rss, err := vmHWM(s.pid)
	if err != nil {
		return err
	}
	s.paced = pacedFigures{lat: lat, window: window, cpuPercent: 100 * (cpu1 - cpu0) / window.Seconds(), rss: rss}
	return nil
}

// floodRound runs one back-to-back round through s by registryFlooders of
// its workers, reading the CPU time of the server, of Redis (pid redis) and
// of this process over it.
func (s *registryServer) floodRound(ctx context.Context, redis int) error {
	before, err := readShares(s.pid, redis)
	if err != nil {
		return err
	}
	lat, took, err := flood(ctx, s.stores[:registryFlooders], s.leases)
	if err != nil {
		return fmt.Errorf("renewing back to back through %s: %w", s.name, err)
	}
	after, err := readShares(s.pid, redis)
	if err != nil {
		return err
	}
	f := &s.flooded
	f.used = f.used.add(after.sub(before))
	f.renewals += len(lat)
	f.rounds = append(f.rounds, round{lat, float64(len(lat)) / took.Seconds()})
	return nil
}

// median is the round of median rate: a 2-core machine shared with other
// work is noisy.
func (f floodFigures) median() round {
	s := slices.SortedFunc(slices.Values(f.rounds), func(a, b round) int { return cmp.Compare(a.rps, b.rps) })
	return s[len(s)/2]
}

// spread is the lowest and highest rate of the rounds.
func (f floodFigures) spread() string {
	rates := make([]float64, 0, len(f.rounds))
	for _, r := range f.rounds {
		rates = append(rates, r.rps)
	}
	return fmt.Sprintf("%.0f-%.0f", slices.Min(rates), slices.Max(rates))
}

// perRenewal is the CPU time of each process a renewal, in microseconds.
func (f floodFigures) perRenewal() cpuShares {
	per := func(sec float64) float64 { return sec / float64(f.renewals) * 1e6 }
	return cpuShares{per(f.used.serve), per(f.used.redis), per(f.used.clients)}
}

// ceiling is the rate 2 idle cores give at most at the CPU time a renewal
// costs the server, Redis and the workers together.
func (f floodFigures) ceiling() float64 { return 2e6 / f.perRenewal().total() }

// cpuShares are CPU times of the registry's server (serve or the floor),
// Redis and this process, whose goroutines are the workers: in seconds, or
// in microseconds a renewal.
type cpuShares struct{ serve, redis, clients float64 }

// readShares reads the CPU times, in seconds, of the server (pid serve),
// Redis (pid redis) and this process.
func readShares(serve, redis int) (cpuShares, error) {
	s, err := procCPU(serve)
	if err != nil {
		return cpuShares{}, err
	}
	r, err := procCPU(redis)
	if err != nil {
		return cpuShares{}, err
	}
	c, err := procCPU(os.Getpid())
	return cpuShares{s, r, c}, err
}

func (a cpuShares) add(b cpuShares) cpuShares {
	return cpuShares{a.serve + b.serve, a.redis + b.redis, a.clients + b.clients}
}

func (a cpuShares) sub(b cpuShares) cpuShares {
	return cpuShares{a.serve - b.serve, a.redis - b.redis, a.clients - b.clients}
}

func (a cpuShares) total() float64 { return a.serve + a.redis + a.clients }

// startServe starts `leasectl serve` in front of the store at store ("":
// the embedded store), with its certificates and a worker's token
// (registryToken) in a folder of b.tmp named name, and returns it with its
// URL, once it serves, and the certificates its clients trust.
func (b *bench) startServe(name, store string) (*exec.Cmd, string, testcert.Files, error) {
	dir := filepath.Join(b.tmp, name)
	if err := os.Mkdir(dir, 0o700); err != nil {
		return nil, "", testcert.Files{}, err
	}
	certs, err := testcert.Generate(dir)
	if err != nil {
		return nil, "", testcert.Files{}, err
	}
	tokens := filepath.Join(dir, "tokens")
	if err := os.WriteFile(tokens, []byte("worker "+registryToken+"\n"), 0o600); err != nil {
		return nil, "", testcert.Files{}, err
	}
	cmd := b.leasectlAt(store, "--namespace", registryNamespace, "--log-level", "info", "serve",
		"--listen", "127.0.0.1:0", "--tokens", tokens, "--tls-cert", certs.ServerCert, "--tls-key", certs.ServerKey, "--rate-limit", "0")
	url, err := startServing(cmd, "leasectl serve")
	if err != nil {
		return nil, "", testcert.Files{}, err
	}
	return cmd, url, certs, nil
}

// startServing starts cmd, a server that logs its URL on stderr in a JSON
// line with a "url" field, as serve does, and returns that URL once it is
// logged; the rest of its stderr is read and dropped. what names it in
// errors.
func startServing(cmd *exec.Cmd, what string) (string, error) {
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return "", err
	}
	if err := cmd.Start(); err != nil {
		return "", err
	}
	// The URL, or stderr's last line and why it was not read further.
	type outcome struct {
		url, last string
		err       error
	}
	found := make(chan outcome, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		var o outcome
		for sc.Scan() {
			var l struct {
				URL string `json:"url"`
			}
			if json.Unmarshal(sc.Bytes(), &l) == nil && l.URL != "" {
				found <- outcome{url: l.URL}
				_, _ = io.Copy(io.Discard, stderr)
				return
			}
			o.last = sc.Text()
		}
		o.err = sc.Err()
		found <- o
	}()
	select {
	case o := <-found:
		switch {
		case o.url != "":
			return o.url, nil
		case o.err != nil: // a line too long to scan: the server may still run
			stopServer(cmd)
			return "", fmt.Errorf("%s: reading its log: %w", what, o.err)
		}
		return "", fmt.Errorf("%s exited before serving: %v: %s", what, cmd.Wait(), o.last)
	case <-time.After(eventTimeout):
		stopServer(cmd)
		return "", fmt.Errorf("%s did not start within %s", what, eventTimeout)
	}
}

// stopServer kills a server that startServing started and reaps it.
func stopServer(cmd *exec.Cmd) {
	_ = cmd.Process.Kill()
	_ = cmd.Wait()
}

// forWorkers runs do for workers 0 to n-1 at once and returns the first
// error.
func forWorkers(n int, do func(i int) error) error {
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Go(func() {
			if err := do(i); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	return <-errs
}

// paced renews every worker's lease once per registryHeartbeat, each at a
// random phase, for registryWindow, and returns the renewals' latencies
// (ms) and how long it took.
func paced(ctx context.Context, stores []*leasestore.Store, leases []*leasestore.Lease) ([]float64, time.Duration, error) {
	var mu sync.Mutex
	var lat []float64
	start := time.Now()
	err := forWorkers(len(stores), func(i int) error {
		next := start.Add(rand.N(registryHeartbeat))
		for next.Before(start.Add(registryWindow)) {
			time.Sleep(time.Until(next))
			t := time.Now()
			if err := stores[i].Renew(ctx, leases[i]); err != nil {
				return err
			}
			d := ms(time.Since(t))
			mu.Lock()
			lat = append(lat, d)
			mu.Unlock()
			next = next.Add(registryHeartbeat)
		}
		return nil
	})
	return lat, time.Since(start), err
}

// flood renews the lease of each of stores's workers back to back for
// registryFlood.
func flood(ctx context.Context, stores []*leasestore.Store, leases []*leasestore.Lease) ([]float64, time.Duration, error) {
	var mu sync.Mutex
	var lat []float64
	start := time.Now()
	end := start.Add(registryFlood)
	err := forWorkers(len(stores), func(i int) error {
		var mine []float64
		for time.Now().Before(end) {
			t := time.Now()
			if err := stores[i].Renew(ctx, leases[i]); err != nil {
				return err
			}
			mine = append(mine, ms(time.Since(t)))
		}
		mu.Lock()
		lat = append(lat, mine...)
		mu.Unlock()
		return nil
	})
	return lat, time.Since(start), err
}

// percentile is the p-th percentile of xs (not modified).
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[min(len(s)-1, int(float64(len(s))*p/100))]
}

// procCPU is the CPU time (user + system, in seconds) process pid used.
func procCPU(pid int) (float64, error) {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The fields after the command's closing parenthesis; utime and stime
	// are the 14th and 15th of the line, the 12th and 13th after it.
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %q %q", pid, f[11], f[12])
	}
	return (utime + stime) / clockTicks, nil
}

// clockTicks is the kernel's USER_HZ, the unit of /proc/PID/stat times: 100
// on every Linux architecture Go builds for.
const clockTicks = 100

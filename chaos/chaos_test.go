package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasectl/leasectl/internal/faultproxy"
	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testenv"
)

var binary string

func TestMain(m *testing.M) {
	if os.Getenv(childDirEnv) != "" {
		os.Exit(runChild())
	}
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	var err error
	if binary, err = testenv.Leasectl(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer testenv.Cleanup()
	return m.Run()
}

// Timing of every run: short, so that a fault resolves within a second or
// two and a run of a few seconds sees many holders; with 500 ms between the
// safety deadline and the lease's expiry, so that a loaded 2-core machine
// does not turn a slow watchdog into an overlap.
const (
	ttl       = time.Second
	heartbeat = 200 * time.Millisecond
	safety    = 500 * time.Millisecond
	// workers loop on the job at once: one holds, the others wait.
	workers = 4
	// hangGuard bounds how long the harness waits for the workers to stop.
	hangGuard = 30 * time.Second
)

// duration is how long a fault run lasts: CHAOS_SECONDS, 20 by default.
func duration(t *testing.T) time.Duration {
	s := os.Getenv("CHAOS_SECONDS")
	if s == "" {
		return 20 * time.Second
	}
	n, err := strconv.ParseFloat(s, 64)
	if err != nil || n <= 0 {
		t.Fatalf("CHAOS_SECONDS=%q: want a positive number of seconds", s)
	}
	return time.Duration(n * float64(time.Second))
}

// harness runs leasectl supervisors on one job against a store of the
// test's own and keeps track of them for the fault injector.
type harness struct {
	t       *testing.T
	url     string // the store's URL
	timing  timing // the supervisors' --ttl, --heartbeat and --safety
	job     string
	records string        // the children's record files
	logs    string        // one stderr file per supervisor
	state   string        // XDG_STATE_HOME of the supervisors
	wrap    []string      // run the child under this command (the negative control's setsid)
	env     []string      // more environment of every leasectl command (a registry's token)
	slots   int           // every run's --slots (0: not given, one slot)
	loops   int           // workers looping on the job at once
	outage  time.Duration // the longest a store fault keeps the store silent (waitBound)

	mu        sync.Mutex
	live      map[*exec.Cmd]bool
	ending    syscall.Signal         // what stopAll sent, to runs started since too
	workerIDs map[*exec.Cmd]string   // each run's --worker-id
	workers   int                    // worker IDs handed out
	holders   map[*exec.Cmd]*current // the supervisors whose children announced themselves, until they exit
	waits     map[*exec.Cmd]*waited  // when each run asked and was served (slots_test.go)
	runs      int
	exits     map[int]int    // leasectl's exit codes; -1: killed by a signal
	exitOf    map[string]int // each run's exit code, by its worker ID
	faults    map[string]int // faults injected, by kind
	// started counts the children that announced themselves; enough is
	// closed once started and the faults reach what a run must show.
	started    int
	enough     chan struct{}
	enoughOnce sync.Once
	// resumers are the stop-supervisor faults still holding a supervisor.
	resumers sync.WaitGroup
}

// current is a running holder: its supervisor and child.
type current struct {
	sup   *exec.Cmd
	child int
}

// timing is the run flags of a harness's supervisors.
type timing struct{ ttl, heartbeat, safety time.Duration }

// startRedis starts a redis-server stopped when the test ends.
func startRedis(t *testing.T) *redistest.Server {
	t.Helper()
	srv, err := redistest.Start(redistest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop() })
	return srv
}

// newProxiedRedisHarness runs job against a redis-server of its own,
// reached through a fault proxy.
func newProxiedRedisHarness(t *testing.T, job string) (*harness, *redistest.Server, *faultproxy.Proxy) {
	t.Helper()
	srv := startRedis(t)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	p, err := faultproxy.Start(u.Host)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return newHarness(t, job, "redis://"+p.Addr()+u.Path), srv, p
}

// newHarness runs job against the store at url.
func newHarness(t *testing.T, job, url string) *harness {
	t.Helper()
	return &harness{
		t: t, url: url, timing: timing{ttl, heartbeat, safety}, job: job,
		records: t.TempDir(), logs: t.TempDir(), state: t.TempDir(),
		loops: workers, live: map[*exec.Cmd]bool{}, workerIDs: map[*exec.Cmd]string{}, exits: map[int]int{}, exitOf: map[string]int{}, faults: map[string]int{},
		holders: map[*exec.Cmd]*current{}, waits: map[*exec.Cmd]*waited{},
		enough: make(chan struct{}),
	}
}

// command is one `leasectl run --wait` of the job whose child is this test
// binary in child mode, running for childRun (empty: random).
func (h *harness) command(childRun string) *exec.Cmd {
	// Each run's worker ID is the harness's, so that how the run ended is
	// known by the ID the store's crash counts name, whatever the run
	// logged (a supervisor SIGKILLed before its child started logs nothing).
	h.mu.Lock()
	h.workers++
	worker := fmt.Sprintf("chaos-%d", h.workers)
	h.mu.Unlock()
	args := []string{"run", "--wait", "--job", h.job, "--worker-id", worker,
		"--ttl", h.timing.ttl.String(), "--heartbeat", h.timing.heartbeat.String(), "--safety", h.timing.safety.String(),
		// Crashes are what this test causes; it must never quarantine.
		"--max-crashes", "1000000"}
	if h.slots > 0 {
		args = append(args, "--slots", strconv.Itoa(h.slots))
	}
	args = append(args, "--")
	args = append(append(args, h.wrap...), os.Args[0])
	cmd := h.leasectl(args...)
	cmd.Env = append(cmd.Env, childDirEnv+"="+h.records, childRunEnv+"="+childRun)
	h.mu.Lock()
	h.workerIDs[cmd] = worker
	h.mu.Unlock()
	return cmd
}

// leasectl is a leasectl command on the harness's store, namespace and
// state folder.
func (h *harness) leasectl(args ...string) *exec.Cmd {
	cmd := exec.Command(binary, args...)
	cmd.Env = append(os.Environ(),
		"LEASECTL_STORE="+h.url,
		"LEASECTL_NAMESPACE=chaos",
		"LEASECTL_LOG_FORMAT=json",
		// Info: a late outcome delivered from the outbox is logged there.
		"LEASECTL_LOG_LEVEL=info",
		"XDG_STATE_HOME="+h.state,
	)
	cmd.Env = append(cmd.Env, h.env...)
	return cmd
}

// start starts cmd with its stderr in a log file and calls onStarted with
// the child's pid when the child announces itself on stdout. The returned
// channel is closed when stdout is closed: wait for it before cmd.Wait.
func (h *harness) start(cmd *exec.Cmd, onStarted func(pid int)) (<-chan struct{}, error) {
	h.mu.Lock()
	h.runs++
	n := h.runs
	h.mu.Unlock()
	logName := filepath.Join(h.logs, fmt.Sprintf("run-%05d.log", n))
	logFile, err := os.Create(logName)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd.Stderr = logFile
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	asked := monotonicNow()
	cmd.Env = append(cmd.Env, childAskedEnv+"="+strconv.FormatInt(asked, 10))
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	h.mu.Lock()
	h.live[cmd] = true
	h.waits[cmd] = &waited{asked: asked}
	if h.ending != 0 {
		// Started as stopAll ran: it gets what the others got.
		cmd.Process.Signal(h.ending)
	}
	h.mu.Unlock()
	outDone := make(chan struct{})
	go func() {
		defer close(outDone)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if s, ok := strings.CutPrefix(sc.Text(), "started "); ok {
				if pid, err := strconv.Atoi(s); err == nil {
					onStarted(pid)
				}
			}
		}
	}()
	return outDone, nil
}

// wait waits for cmd's stdout to close and cmd to exit, and records how it
// ended.
func (h *harness) wait(cmd *exec.Cmd, outDone <-chan struct{}) {
	<-outDone
	cmd.Wait()
	h.mu.Lock()
	defer h.mu.Unlock()
	delete(h.live, cmd)
	delete(h.holders, cmd)
	h.waits[cmd].ended = monotonicNow()
	h.exits[cmd.ProcessState.ExitCode()]++
	h.exitOf[h.workerIDs[cmd]] = cmd.ProcessState.ExitCode()
}

// worker runs the job again and again until stop is closed.
func (h *harness) worker(stop <-chan struct{}) {
	for {
		select {
		case <-stop:
			return
		default:
		}
		cmd := h.command("")
		outDone, err := h.start(cmd, func(pid int) {
			h.mu.Lock()
			h.holders[cmd] = &current{sup: cmd, child: pid}
			h.waits[cmd].served = monotonicNow()
			h.started++
			h.checkEnough()
			h.mu.Unlock()
		})
		if err != nil {
			h.t.Errorf("starting leasectl: %v", err)
			return
		}
		h.wait(cmd, outDone)
	}
}

// stopAll ends every running supervisor with SIGTERM (a waiter ends its
// wait, a holder's child is stopped), after thawing any it had stopped.
func (h *harness) stopAll(sig syscall.Signal) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ending = sig
	for cmd := range h.live {
		cmd.Process.Signal(syscall.SIGCONT)
		cmd.Process.Signal(sig)
	}
}

// fault is one kind of fault. inject reports whether it found something to
// hit (there may be no holder at that instant).
type fault struct {
	name   string
	inject func(h *harness, rng *rand.Rand) (bool, error)
}

// pause is a random time in [lo, hi).
func pause(rng *rand.Rand, lo, hi time.Duration) time.Duration {
	return lo + time.Duration(rng.Int64N(int64(hi-lo)))
}

// currentHolder is one of the running holders (any, with several slots),
// or nil.
func (h *harness) currentHolder() *current {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, c := range h.holders {
		return c
	}
	return nil
}

var (
	killSupervisor = fault{"kill-supervisor", func(h *harness, _ *rand.Rand) (bool, error) {
		c := h.currentHolder()
		return c != nil && c.sup.Process.Kill() == nil, nil
	}}
	// stopSupervisor freezes the holder's supervisor for up to 2.5 s, often
	// past the lease's expiry, so that only the watchdog stands between its
	// child and the next holder; meanwhile other faults go on.
	stopSupervisor = fault{"stop-supervisor", func(h *harness, rng *rand.Rand) (bool, error) {
		c := h.currentHolder()
		if c == nil || c.sup.Process.Signal(syscall.SIGSTOP) != nil {
			return false, nil
		}
		hold, kill := pause(rng, 500*time.Millisecond, 2500*time.Millisecond), rng.IntN(2) == 0
		h.resumers.Add(1)
		go func() {
			defer h.resumers.Done()
			time.Sleep(hold)
			if kill {
				c.sup.Process.Kill()
			}
			c.sup.Process.Signal(syscall.SIGCONT)
		}()
		return true, nil
	}}
	killChild = fault{"kill-child", func(h *harness, _ *rand.Rand) (bool, error) {
		c := h.currentHolder()
		return c != nil && killChildOf(c.sup.Process.Pid, c.child), nil
	}}
	killWaiter = fault{"kill-waiter", func(h *harness, rng *rand.Rand) (bool, error) {
		h.mu.Lock()
		var waiters []*exec.Cmd
		for cmd := range h.live {
			if h.holders[cmd] == nil {
				waiters = append(waiters, cmd)
			}
		}
		if len(waiters) == 0 {
			h.mu.Unlock()
			return false, nil
		}
		w := waiters[rng.IntN(len(waiters))]
		// Its wait is cut short: the starvation check leaves it out.
		h.waits[w].cut = true
		h.mu.Unlock()
		return w.Process.Kill() == nil, nil
	}}
)

// freezeRedis freezes srv (SIGSTOP) for 200 ms to 1.2 s.
func freezeRedis(srv *redistest.Server) fault {
	return fault{"freeze-redis", func(_ *harness, rng *rand.Rand) (bool, error) {
		if err := srv.Freeze(); err != nil {
			return false, err
		}
		time.Sleep(pause(rng, 200*time.Millisecond, 1200*time.Millisecond))
		return true, srv.Thaw()
	}}
}

// dropReplies makes p drop Redis's replies while requests still reach it,
// for 200 ms to 1.2 s: a one-way partition, in which the store acts on
// requests whose answers never come back (grants, releases).
func dropReplies(p *faultproxy.Proxy) fault {
	return fault{"drop-replies", func(_ *harness, rng *rand.Rand) (bool, error) {
		p.Set(faultproxy.DropReplies)
		time.Sleep(pause(rng, 200*time.Millisecond, 1200*time.Millisecond))
		p.Set(faultproxy.Pass)
		return true, nil
	}}
}

// restartRedis restarts srv, which keeps nothing on disk: the store loses
// every lease.
func restartRedis(srv *redistest.Server) fault {
	return fault{"restart-redis", func(*harness, *rand.Rand) (bool, error) {
		return true, srv.Restart()
	}}
}

// killChildOf SIGKILLs pid if it is still a child of supervisor: the pidfd
// is opened before the check, so a pid reused since cannot be hit.
func killChildOf(supervisor, pid int) bool {
	fd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		return false
	}
	defer unix.Close(fd)
	if parentOf(pid) != supervisor {
		return false
	}
	return unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0) == nil
}

// parentOf is pid's parent from /proc, or 0.
func parentOf(pid int) int {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	s := string(stat)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 2 {
		return 0
	}
	ppid, _ := strconv.Atoi(f[1])
	return ppid
}

// inject injects faults of the given kinds, each round in a new random
// order with a random pause before each, until stop is closed.
func (h *harness) inject(stop <-chan struct{}, kinds []fault) {
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	for {
		for _, i := range rng.Perm(len(kinds)) {
			select {
			case <-stop:
				return
			case <-time.After(pause(rng, 50*time.Millisecond, 300*time.Millisecond)):
			}
			hit, err := kinds[i].inject(h, rng)
			if err != nil {
				h.t.Errorf("%s: %v", kinds[i].name, err)
				return
			}
			if hit {
				h.mu.Lock()
				h.faults[kinds[i].name]++
				h.checkEnough()
				h.mu.Unlock()
			}
		}
	}
}

// spacing lets a kind of fault come at most every least: one that leaves
// the store unable to serve for a while would, back to back, leave the run
// nothing but waiting.
type spacing struct {
	least time.Duration
	mu    sync.Mutex
	last  time.Time
}

// due reports whether the fault may come now, and if so counts it as come.
func (s *spacing) due() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if time.Since(s.last) < s.least {
		return false
	}
	s.last = time.Now()
	return true
}

// restart counts the spacing from now: from the end of a fault that lasts.
func (s *spacing) restart() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last = time.Now()
}

// expect is what a chaos run must show.
type expect int

const (
	// exactCrashes: exclusive, and no false crash (see falseCrashes): the
	// store keeps every write it acknowledged, releases included.
	exactCrashes expect = iota
	// exclusive: no two children alive at once, tokens rise; false crashes
	// are reported (a failover may lose a release, which is not waited for
	// on replicas).
	exclusive
	// tokensRise: tokens rise; children may overlap, since the faults make
	// the store lose acknowledged writes (fencing protects the downstream).
	tokensRise
	// overlapsReported: tokens rise; overlaps are counted and reported as a
	// figure, not failed (a configuration that does not promise exclusion
	// under the faults, measured to say how often it breaks).
	overlapsReported
)

// A run where nothing happened proves nothing: it must see at least
// minHolders children and minFaults faults.
const (
	minHolders = 5
	minFaults  = 3
)

// checkEnough closes h.enough once the run saw minHolders children and
// minFaults faults. Called with h.mu held.
func (h *harness) checkEnough() {
	if h.started >= minHolders && h.faultCount() >= minFaults {
		h.enoughOnce.Do(func() { close(h.enough) })
	}
}

// faultCount is how many faults were injected, of every kind. Called with
// h.mu held.
func (h *harness) faultCount() int {
	n := 0
	for _, c := range h.faults {
		n += c
	}
	return n
}

// chaos runs the workers under faults of the given kinds for d, and on
// until the run has seen enough to show anything (for at most 2·d more: a
// deployment that spends most of a run failing over, on a loaded machine,
// serves few leases), stops them, and checks the children's records and
// the crashes counted against want.
func (h *harness) chaos(d time.Duration, kinds []fault, want expect) {
	t := h.t
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range h.loops {
		wg.Go(func() { h.worker(stop) })
	}
	injected := make(chan struct{})
	go func() {
		defer close(injected)
		h.inject(stop, kinds)
	}()
	time.Sleep(d)
	select {
	case <-h.enough:
	case <-time.After(2 * d):
	}
	close(stop)
	<-injected
	h.resumers.Wait()
	h.stopAll(syscall.SIGTERM)
	if !waitGroup(&wg, hangGuard) {
		// SIGABRT, which leasectl does not catch, makes Go print every
		// goroutine's stack to the run's log before it dies.
		t.Errorf("workers still running %s after the end; their stacks:", hangGuard)
		h.stopAll(syscall.SIGABRT)
		if !waitGroup(&wg, hangGuard) {
			h.stopAll(syscall.SIGKILL)
			wg.Wait()
		}
		h.logLinesWith([]string{"SIGABRT", "goroutine ", ".go:"})
	}
	// A child whose supervisor was SIGKILLed just before the end may live
	// until its watchdog's deadline: let that time pass before reading.
	time.Sleep(h.timing.safety + 200*time.Millisecond)

	hs, err := readHolders(h.records)
	if err != nil {
		t.Fatal(err)
	}
	found := violations(hs, max(h.slots, 1), want == exactCrashes || want == exclusive)
	for _, v := range found {
		t.Errorf("violation: %s", v)
	}
	if len(found) > 0 {
		h.logTokens(found)
	}
	if h.slots > 0 {
		h.checkWaits()
	}
	if want == overlapsReported {
		overlaps := len(violations(hs, 1, true)) - len(found)
		t.Logf("overlaps=%d (two children alive at once; not promised in this configuration)", overlaps)
	}
	h.mu.Lock()
	nFaults := h.faultCount()
	h.mu.Unlock()
	falseCrashes := h.falseCrashes()
	t.Logf("violations=%d false_crashes=%d holders=%d faults=%d", len(found), falseCrashes, len(hs), nFaults)
	t.Logf("faults by kind: %v; leasectl exit codes (-1: killed): %v; runs: %d", h.faults, h.exits, h.runs)
	if want == exactCrashes && falseCrashes > 0 {
		t.Errorf("%d false crashes: runs whose workers did not die were counted as crashes, and their outcomes never reached the store", falseCrashes)
	}
	if len(hs) < minHolders || nFaults < minFaults {
		t.Errorf("only %d holders and %d faults in %s: too few to show anything", len(hs), nFaults, 3*d)
	}
}

// falseCrashes delivers what the runs kept in the host's outbox (as the
// host's next leasectl would), then counts the crashes the runs' acquires
// counted for a run whose supervisor did not die (it exited by itself) and
// whose real outcome never reached the store, neither from the run itself
// nor through the outbox: crashes that are not a worker's death, left
// uncorrected. The crashes of children killed by a signal are recorded by
// their own supervisors' releases, and are not among them. (What a late
// outcome corrects, given the history, is the stores' conformance rules'
// concern: a crash whose streak a completed run ended meanwhile is
// recorded but has nothing left to withdraw.)
func (h *harness) falseCrashes() int {
	t := h.t
	deliver := h.leasectl("scan")
	logName := filepath.Join(h.logs, "deliver.log")
	logFile, err := os.Create(logName)
	if err != nil {
		t.Fatal(err)
	}
	deliver.Stderr, deliver.Stdout = logFile, io.Discard
	if err := deliver.Run(); err != nil {
		t.Errorf("delivering the outbox with leasectl scan: %v", err)
	}
	logFile.Close()
	var counted []string // workers whose crash was counted, in order
	recorded := map[string]bool{}
	withdrawn := 0
	logs, _ := filepath.Glob(filepath.Join(h.logs, "*.log"))
	for _, name := range logs {
		b, _ := os.ReadFile(name)
		for _, line := range strings.Split(string(b), "\n") {
			// A late outcome's line names the run it delivered as its
			// (last) worker, and says whether it withdrew a crash.
			var l struct {
				Worker         string `json:"worker"`
				CrashedWorker  string `json:"crashed_worker"`
				CrashWithdrawn *bool  `json:"crash_withdrawn"`
			}
			if json.Unmarshal([]byte(line), &l) != nil {
				continue
			}
			if l.CrashedWorker != "" {
				counted = append(counted, l.CrashedWorker)
			}
			if l.CrashWithdrawn != nil {
				recorded[l.Worker] = true
				if *l.CrashWithdrawn {
					withdrawn++
				}
			}
		}
	}
	t.Logf("late outcomes recorded: %d, crashes they withdrew: %d", len(recorded), withdrawn)
	died := map[string]bool{}
	h.mu.Lock()
	for worker, code := range h.exitOf {
		if code == -1 {
			died[worker] = true
		}
	}
	h.mu.Unlock()
	var falses []string
	for _, w := range counted {
		if !died[w] && !recorded[w] {
			t.Logf("false crash: worker %s exited by itself, yet its run was counted as a crash", w)
			falses = append(falses, `"`+w+`"`)
		}
	}
	h.logLinesWith(falses)
	return len(falses)
}

// logTokens logs the supervisors' log lines about the tokens named in the
// violations, to explain them.
func (h *harness) logTokens(found []string) {
	var tokens []string
	for _, v := range found {
		for _, w := range strings.Fields(strings.NewReplacer("(", " ", ")", " ").Replace(v)) {
			if _, err := strconv.ParseInt(w, 10, 64); err == nil && len(w) > 6 {
				tokens = append(tokens, w)
			}
		}
	}
	h.logLinesWith(tokens)
}

// logLinesWith logs every line of the runs' logs that holds one of words.
func (h *harness) logLinesWith(words []string) {
	logs, _ := filepath.Glob(filepath.Join(h.logs, "*.log"))
	for _, name := range logs {
		b, _ := os.ReadFile(name)
		for _, line := range strings.Split(string(b), "\n") {
			if slices.ContainsFunc(words, func(w string) bool { return strings.Contains(line, w) }) {
				h.t.Logf("%s: %s", filepath.Base(name), line)
			}
		}
	}
}

// waitGroup waits for wg up to limit and reports whether it finished.
func waitGroup(wg *sync.WaitGroup, limit time.Duration) bool {
	done := make(chan struct{})
	go func() {
		wg.Wait()
		close(done)
	}()
	select {
	case <-done:
		return true
	case <-time.After(limit):
		return false
	}
}

// TestChaos: supervisors SIGKILLed and SIGSTOPped (then resumed or killed),
// children SIGKILLed, waiters SIGKILLed, Redis frozen, Redis's replies
// dropped while requests still reach it (through a proxy). No two children
// may ever be alive at once, tokens rise with every holder, and no run whose
// worker did not die stays counted as a crash (false_crashes=0).
func TestChaos(t *testing.T) {
	h, srv, p := newProxiedRedisHarness(t, "chaos")
	// Stopped supervisors come twice as often as the rest: only the watchdog
	// stands between a frozen supervisor's child and the next holder.
	h.chaos(duration(t), []fault{killSupervisor, stopSupervisor, stopSupervisor, killChild, killWaiter,
		freezeRedis(srv), dropReplies(p)}, exactCrashes)
}

// TestChaosRedisRestarts adds restarts of a Redis without persistence: the
// store loses the lease, so a holder's child may briefly overlap the next
// one's until its renewal is refused (docs/design.md §2: fencing protects the
// downstream then). Tokens must still rise with every holder.
func TestChaosRedisRestarts(t *testing.T) {
	srv := startRedis(t)
	h := newHarness(t, "chaos-restart", srv.URL)
	h.chaos(max(duration(t)/2, 5*time.Second), []fault{restartRedis(srv), killSupervisor, killChild}, tokensRise)
}

// TestChaosCatchesAnEscapedChild is the negative control: a child that
// leaves its process group with setsid(1) is outside what leasectl can
// track (docs/design.md §2, §11). --fork makes the escapee a grandchild: the direct
// child's parent-death signal would kill it even in a session of its own. When its supervisor is SIGKILLed, the watchdog
// kills the group but not the escaped child, which goes on running while
// the waiter takes the lease. The check must see that overlap.
func TestChaosCatchesAnEscapedChild(t *testing.T) {
	if _, err := exec.LookPath("setsid"); err != nil {
		t.Skip("setsid(1) is not installed")
	}
	h := newHarness(t, "chaos-escape", startRedis(t).URL)
	h.wrap = []string{"setsid", "--fork", "--wait"}
	escaped := make(chan int, 1)
	holder := h.command("3s")
	if _, err := h.start(holder, func(pid int) { escaped <- pid }); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Process.Kill(); holder.Wait() })
	var child int
	select {
	case child = <-escaped:
	case <-time.After(hangGuard):
		t.Fatal("the holder's child never started")
	}
	// The escaped child is nobody's to kill but ours once its group is gone.
	t.Cleanup(func() { syscall.Kill(child, syscall.SIGKILL) })
	h.wrap = nil
	waiter := h.command("100ms")
	waiterOut, err := h.start(waiter, func(int) {})
	if err != nil {
		t.Fatal(err)
	}
	if err := holder.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		h.wait(waiter, waiterOut)
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(hangGuard):
		waiter.Process.Kill()
		t.Fatal("the waiter never finished")
	}
	hs, err := readHolders(h.records)
	if err != nil {
		t.Fatal(err)
	}
	found := violations(hs, 1, true)
	t.Logf("negative control: violations=%d holders=%d (%q)", len(found), len(hs), found)
	if len(hs) != 2 || len(found) == 0 {
		t.Errorf("the check saw %d holders and %d violations; want both children and their overlap", len(hs), len(found))
	}
	if errors.Is(syscall.Kill(child, 0), syscall.ESRCH) {
		t.Errorf("the escaped child %d is gone already: the control did not escape", child)
	}
}

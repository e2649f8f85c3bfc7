package etcdstore

import (
	"bufio"
	"context"
	"errors"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/internal/testenv"
)

// The fault tests drive the built binary, as a user would, against a
// 3-member cluster of their own, and kill, freeze and restart its members.
// They run in parallel (two at a time on two cores, with -parallel's
// default) with each other and with the conformance suite, which mostly
// waits for leases to expire.
// Their runs use --ttl 3s: renewals every 1 s, the child killed 1.5 s after
// the last confirmed renewal's send time.

// faultGuard only catches hangs; the timing assertions use their own
// bounds.
const faultGuard = 30 * time.Second

// deadlineMargin is how late past --safety a child may die: the renewal's
// timer, a kill and a reap on a loaded 2-core machine.
const deadlineMargin = 500 * time.Millisecond

// cluster3 starts a 3-member cluster for one test.
func cluster3(t *testing.T) *etcdtest.Cluster {
	t.Helper()
	c, err := etcdtest.StartCluster(etcdtest.Options{Members: 3})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	return c
}

func leader(t *testing.T, c *etcdtest.Cluster) *etcdtest.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), faultGuard)
	defer cancel()
	m, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func binary(t *testing.T) string {
	t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	return bin
}

// endpoints is the store URL of the members given.
func endpoints(ms ...*etcdtest.Member) string {
	var list []string
	for _, m := range ms {
		list = append(list, strings.TrimPrefix(m.ClientURL, "http://"))
	}
	return "etcd://" + strings.Join(list, ",")
}

// proc is a leasectl process whose child reports "started TOKEN PID" on
// stdout.
type proc struct {
	t       *testing.T
	cmd     *exec.Cmd
	started chan string // the child's token and pid
	logs    chan string // leasectl's log lines
	done    chan struct{}
	exited  time.Time
	pid     int // the child's, once started
}

// childScript reports the token and its pid and sleeps (exec keeps the
// pid): the run lasts until it is killed or the test ends it.
const childScript = `echo "started $LEASECTL_FENCING_TOKEN $$"; exec sleep 60`

// run starts `leasectl run --job JOB --ttl 3s ARGS... -- sh -c childScript`
// against url in namespace ns; a --ttl in args wins.
func run(t *testing.T, url, ns, job string, args ...string) *proc {
	t.Helper()
	argv := append([]string{"run", "--job", job, "--ttl", "3s"}, args...)
	argv = append(argv, "--", "sh", "-c", childScript)
	cmd := exec.Command(binary(t), argv...)
	cmd.Env = append(os.Environ(), "LEASECTL_STORE="+url, "LEASECTL_NAMESPACE="+ns, "LEASECTL_LOG_FORMAT=json")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	errOut, err := cmd.StderrPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, started: make(chan string, 1), logs: make(chan string, 256), done: make(chan struct{})}
	var logs sync.WaitGroup
	logs.Go(func() {
		sc := bufio.NewScanner(errOut)
		for sc.Scan() {
			t.Logf("leasectl[%d]: %s", cmd.Process.Pid, sc.Text())
			select {
			case p.logs <- sc.Text():
			default:
			}
		}
	})
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if tok, ok := strings.CutPrefix(sc.Text(), "started "); ok {
				p.started <- tok
			}
		}
		logs.Wait()
		cmd.Wait()
		p.exited = time.Now()
		close(p.done)
	}()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-p.done
	})
	return p
}

// token waits for the child to start and returns its fencing token.
func (p *proc) token() int64 {
	p.t.Helper()
	select {
	case line := <-p.started:
		tok, pid, _ := strings.Cut(line, " ")
		n, err := strconv.ParseInt(tok, 10, 64)
		p.pid, _ = strconv.Atoi(pid)
		if err != nil || p.pid == 0 {
			p.t.Fatalf("child reported %q, want its token and pid", line)
		}
		return n
	case <-p.done:
		p.t.Fatalf("leasectl exited %d before its child started", p.cmd.ProcessState.ExitCode())
	case <-time.After(faultGuard):
		p.t.Fatal("the child did not start")
	}
	return 0
}

// exit waits for leasectl to exit and returns its code and when it exited.
func (p *proc) exit() (int, time.Time) {
	p.t.Helper()
	select {
	case <-p.done:
		return p.cmd.ProcessState.ExitCode(), p.exited
	case <-time.After(faultGuard):
		p.t.Fatal("leasectl did not exit")
	}
	return -1, time.Time{}
}

// waiting waits until leasectl --wait --log-level debug logs that the job
// is held and it waits: its subscription is in place.
func (p *proc) waiting() {
	p.t.Helper()
	timeout := time.After(faultGuard)
	for {
		select {
		case line := <-p.logs:
			if strings.Contains(line, "lease held; waiting") {
				return
			}
		case <-timeout:
			p.t.Fatal("leasectl --wait never logged that it waits")
		}
	}
}

// childDeath waits for the child (started) to exit and returns when it did,
// through a pidfd: an event, not polling.
func (p *proc) childDeath() time.Time {
	p.t.Helper()
	fd, err := unix.PidfdOpen(p.pid, 0)
	if errors.Is(err, unix.ESRCH) {
		return time.Now()
	}
	if err != nil {
		p.t.Fatalf("pidfd_open(%d): %v", p.pid, err)
	}
	defer unix.Close(fd)
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		n, err := unix.Poll(fds, int(faultGuard.Milliseconds()))
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil || n == 0 {
			p.t.Fatalf("child %d did not exit: %v", p.pid, err)
		}
		return time.Now()
	}
}

// within waits up to d for leasectl to exit, reporting whether it did: the
// window of a fault, after which a run that survived it must still hold.
func (p *proc) within(d time.Duration) bool {
	select {
	case <-p.done:
		return true
	case <-time.After(d):
		return false
	}
}

// stop ends a run that held on: SIGTERM, forwarded to the child.
func (p *proc) stop() int {
	p.t.Helper()
	p.cmd.Process.Signal(syscall.SIGTERM)
	code, _ := p.exit()
	return code
}

// TestFaultLeaderKilled SIGKILLs the leader while a run holds the lease and
// another waits for it: the holder keeps its lease through the election or
// loses it cleanly (125), and the waiter's child never starts while the
// holder's lives.
func TestFaultLeaderKilled(t *testing.T) {
	t.Parallel()
	c := cluster3(t)
	url, ns := c.URL(), freshNamespace()
	holder := run(t, url, ns, "job")
	first := holder.token()
	waiter := run(t, url, ns, "job", "--wait", "--log-level", "debug")
	waiter.waiting()
	if err := leader(t, c).Kill(); err != nil {
		t.Fatal(err)
	}
	// The election takes about a second; a renewal it delays past --safety
	// kills the holder's child.
	if holder.within(4 * time.Second) {
		code, exited := holder.exit()
		if code != 125 {
			t.Fatalf("holder exited %d during the election, want 125 (lease lost) or to hold on", code)
		}
		next := waiter.token()
		if !time.Now().After(exited) || next <= first {
			t.Fatalf("waiter started with token %d after the holder (token %d) exited: want a greater token", next, first)
		}
		return
	}
	select {
	case tok := <-waiter.started:
		t.Fatalf("waiter's child started (token %s) while the holder's still runs", tok)
	default:
	}
	holder.stop()
	if next := waiter.token(); next <= first {
		t.Fatalf("waiter's token %d after the failover, want above %d", next, first)
	}
}

// TestFaultLeaderFrozen SIGSTOPs the leader, the only member the holder
// knows, past the safety window: the holder's child dies by its deadline
// (1.5 s after the last renewal was sent), and a waiter that knows the
// other members gets the job only after it died, once etcd's new leader
// expired the frozen run's lease.
func TestFaultLeaderFrozen(t *testing.T) {
	t.Parallel()
	c := cluster3(t)
	l := leader(t, c)
	var others []*etcdtest.Member
	for _, m := range c.Members {
		if m != l {
			others = append(others, m)
		}
	}
	ns := freshNamespace()
	holder := run(t, endpoints(l), ns, "job")
	first := holder.token()
	waiter := run(t, endpoints(others...), ns, "job", "--wait", "--log-level", "debug")
	waiter.waiting()
	frozen := time.Now()
	if err := l.Freeze(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Thaw() })
	died := holder.childDeath()
	// The last renewal was sent at most a heartbeat before the freeze.
	if late := died.Sub(frozen); late > time.Second+1500*time.Millisecond+deadlineMargin {
		t.Errorf("holder's child died %s after the freeze, want by heartbeat + safety (2.5 s)", late)
	}
	next := waiter.token()
	if started := time.Now(); !started.After(died) || next <= first {
		t.Fatalf("waiter's child started (token %d) %s after the holder's died, want later and a token above %d",
			next, started.Sub(died), first)
	}
	waiter.stop()
	if code, _ := holder.exit(); code != 125 {
		t.Fatalf("holder exited %d with its only member frozen, want 125", code)
	}
}

// TestFaultMemberRestarted restarts a member under a held lease: the run
// keeps its lease, and the restarted member serves the next run. A renewal
// that was on its way to the member fails, and is retried on another
// within the safety window: --ttl 6s leaves 1 s for that between the first
// heartbeat and the deadline, where 3 s leaves half a second, too little
// on a loaded machine under -race.
func TestFaultMemberRestarted(t *testing.T) {
	t.Parallel()
	c := cluster3(t)
	ns := freshNamespace()
	holder := run(t, c.URL(), ns, "job", "--ttl", "6s")
	first := holder.token()
	m := c.Members[0]
	if m == leader(t, c) {
		m = c.Members[1] // the leader's death is TestFaultLeaderKilled's
	}
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	if holder.within(4 * time.Second) {
		code, _ := holder.exit()
		t.Fatalf("holder exited %d while one of three members restarted, want it to hold on", code)
	}
	if code := holder.stop(); code != 143 {
		t.Fatalf("holder stopped by SIGTERM exited %d, want 143", code)
	}
	next := run(t, endpoints(m), ns, "job")
	if tok := next.token(); tok <= first {
		t.Fatalf("token %d through the restarted member, want above %d", tok, first)
	}
	next.stop()
}

// TestFaultClusterRestarted restarts every member at once: etcd keeps its
// data, so a run after the restart gets a greater token and the job's
// history is still there.
func TestFaultClusterRestarted(t *testing.T) {
	t.Parallel()
	c := cluster3(t)
	ns := freshNamespace()
	before := run(t, c.URL(), ns, "job")
	first := before.token()
	before.stop()
	if err := c.Restart(); err != nil {
		t.Fatal(err)
	}
	after := run(t, c.URL(), ns, "job")
	if tok := after.token(); tok <= first {
		t.Fatalf("token %d after the cluster restarted, want above %d", tok, first)
	}
	after.stop()
	s := openEtcd(t, c.URL(), ns)
	st, err := s.Status(call(t, faultGuard), "job")
	if err != nil {
		t.Fatal(err)
	}
	if st.Attempts != 2 || st.LastToken <= first {
		t.Fatalf("after the restart: %d attempts, last token %d; want 2 attempts and a token above %d", st.Attempts, st.LastToken, first)
	}
}

// TestFaultQuorumLost stops two of three members: the holder's child dies
// by its deadline (125) and a new run is refused as unavailable (69)
// without starting its child.
func TestFaultQuorumLost(t *testing.T) {
	t.Parallel()
	c := cluster3(t)
	ns := freshNamespace()
	holder := run(t, c.URL(), ns, "job")
	holder.token()
	lost := time.Now()
	for _, m := range c.Members[:2] {
		if err := m.Kill(); err != nil {
			t.Fatal(err)
		}
	}
	died := holder.childDeath()
	if late := died.Sub(lost); late > time.Second+1500*time.Millisecond+deadlineMargin {
		t.Errorf("holder's child died %s after the quorum was lost, want by heartbeat + safety (2.5 s)", late)
	}
	// While the holder tries to record its outcome (up to 5 s), a new run
	// comes.
	refused := run(t, c.URL(), ns, "other")
	if code, _ := holder.exit(); code != 125 {
		t.Fatalf("holder exited %d after the quorum was lost, want 125", code)
	}
	if code, _ := refused.exit(); code != 69 {
		t.Fatalf("run without a quorum exited %d, want 69", code)
	}
	select {
	case tok := <-refused.started:
		t.Fatalf("a child started (token %s) without a quorum", tok)
	default:
	}
}

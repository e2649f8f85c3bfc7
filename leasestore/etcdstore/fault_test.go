package etcdstore

import (
	"context"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/etcdtest"
	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/internal/testserver"
)

// The fault tests drive the built binary, as a user would, against a
// 3-member cluster of their own, and kill, freeze and restart its members.
// They run in parallel (two at a time on two cores, with -parallel's
// default) with each other and with the conformance suite, which mostly
// waits for leases to expire.
// Their runs use --ttl 3s: renewals every 1 s, the child killed 1.5 s after
// the last confirmed renewal's send time.

// deadlineMargin is how late past --safety a child may die: the renewal's
// timer, a kill and a reap on a loaded 2-core machine.
const deadlineMargin = 500 * time.Millisecond

// cluster3 starts a 3-member cluster for one test.
func cluster3(t *testing.T) *etcdtest.Cluster {
	t.Helper()
	c, err := etcdtest.StartCluster(etcdtest.Options{Members: 3})
	return testserver.Own(t, c, err)
}

func leader(t *testing.T, c *etcdtest.Cluster) *etcdtest.Member {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), testenv.HangGuard)
	defer cancel()
	m, err := c.Leader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	return m
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
	*testenv.Process
	t   *testing.T
	pid int // the child's, once started
}

// childScript reports the token and its pid and sleeps (exec keeps the
// pid): the run lasts until it is killed or the test ends it.
const childScript = `echo "started $LEASECTL_FENCING_TOKEN $$"; exec sleep 60`

// run starts `leasectl run --job JOB --ttl 3s ARGS... -- sh -c childScript`
// against url in namespace ns; a --ttl in args wins.
func run(t *testing.T, url, ns, job string, args ...string) *proc {
	t.Helper()
	return runIn(t, "", url, ns, job, args...)
}

// runIn is run with XDG_STATE_HOME set to state ("": the test process's).
func runIn(t *testing.T, state, url, ns, job string, args ...string) *proc {
	t.Helper()
	argv := append([]string{"run", "--job", job, "--ttl", "3s"}, args...)
	argv = append(argv, "--", "sh", "-c", childScript)
	cmd := testenv.Command(t, argv...)
	cmd.Env = append(os.Environ(), "LEASECTL_STORE="+url, "LEASECTL_NAMESPACE="+ns, "LEASECTL_LOG_FORMAT=json")
	if state != "" {
		cmd.Env = append(cmd.Env, "XDG_STATE_HOME="+state)
	}
	return &proc{Process: testenv.Start(t, cmd), t: t}
}

// token waits for the child to start and returns its fencing token.
func (p *proc) token() int64 {
	p.t.Helper()
	line, _ := p.Expect("started ")
	tok, pid, _ := strings.Cut(line, " ")
	n, err := strconv.ParseInt(tok, 10, 64)
	p.pid, _ = strconv.Atoi(pid)
	if err != nil || p.pid == 0 {
		p.t.Fatalf("child reported %q, want its token and pid", line)
	}
	return n
}

// startedYet returns the child's report, without waiting, if it has
// started.
func (p *proc) startedYet() (string, bool) {
	select {
	case line, ok := <-p.Lines():
		return line, ok
	default:
		return "", false
	}
}

// waiting waits until leasectl --wait --log-level debug logs that the job
// is held and it waits: its subscription is in place.
func (p *proc) waiting() { p.ExpectLog("lease held; waiting") }

// childDeath waits for the child (started) to exit and returns when it did.
func (p *proc) childDeath() time.Time { return testenv.DeathTime(p.t, p.pid) }

// within waits up to d for leasectl to exit, reporting whether it did: the
// window of a fault, after which a run that survived it must still hold.
func (p *proc) within(d time.Duration) bool {
	select {
	case <-p.Done():
		return true
	case <-time.After(d):
		return false
	}
}

// stop ends a run that held on: SIGTERM, forwarded to the child.
func (p *proc) stop() int {
	p.t.Helper()
	p.Cmd.Process.Signal(syscall.SIGTERM)
	return p.ExitCode()
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
		code, exited := holder.Exit()
		if code != 125 {
			t.Fatalf("holder exited %d during the election, want 125 (lease lost) or to hold on", code)
		}
		next := waiter.token()
		if !time.Now().After(exited) || next <= first {
			t.Fatalf("waiter started with token %d after the holder (token %d) exited: want a greater token", next, first)
		}
		return
	}
	if line, ok := waiter.startedYet(); ok {
		t.Fatalf("waiter's child said %q while the holder's still runs", line)
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
	if code, _ := holder.Exit(); code != 125 {
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
		code, _ := holder.Exit()
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
	st, err := s.Status(call(t, testenv.HangGuard), "job")
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
	if code, _ := holder.Exit(); code != 125 {
		t.Fatalf("holder exited %d after the quorum was lost, want 125", code)
	}
	if code, _ := refused.Exit(); code != 69 {
		t.Fatalf("run without a quorum exited %d, want 69", code)
	}
	if line, ok := refused.startedYet(); ok {
		t.Fatalf("a child said %q without a quorum", line)
	}
}

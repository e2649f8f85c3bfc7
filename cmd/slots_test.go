package cmd

import (
	"bufio"
	"context"
	"io"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/leasestore"
)

// slotRun is a `leasectl run` of the built binary whose child prints its
// slot and token, then holds the lease until its stdin is closed.
type slotRun struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	out   *bufio.Reader
	done  chan struct{} // closed once the run exited, with res set
	res   binaryResult
}

// startHeld starts `leasectl run` with args before the child, in env.
func startHeld(t *testing.T, env []string, args ...string) *slotRun {
	t.Helper()
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string{"run"}, args...), "--", "sh", "-c", `echo "$LEASECTL_SLOT $LEASECTL_FENCING_TOKEN"; cat >/dev/null`)
	cmd := exec.Command(bin, argv...)
	cmd.Env = env
	r := &slotRun{cmd: cmd, done: make(chan struct{})}
	if r.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	r.out = bufio.NewReader(stdout)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = cmd.Wait()
		r.res = binaryResult{stderr: stderr.String(), code: cmd.ProcessState.ExitCode()}
		close(r.done)
	}()
	t.Cleanup(func() {
		_ = r.stdin.Close()
		<-r.done
	})
	return r
}

// started reads the slot and token the child printed, once it runs.
func (r *slotRun) started(t *testing.T) (slot int, token int64) {
	t.Helper()
	line := make(chan string, 1)
	go func() {
		s, _ := r.out.ReadString('\n')
		line <- s
	}()
	select {
	case s := <-line:
		f := strings.Fields(s)
		if len(f) != 2 {
			t.Fatalf("the child printed %q, want its slot and token", s)
		}
		slot, _ = strconv.Atoi(f[0])
		token, _ = strconv.ParseInt(f[1], 10, 64)
		return slot, token
	case <-r.done:
		t.Fatalf("run exited %d before its child started: %s", r.res.code, r.res.stderr)
	case <-time.After(binaryHangGuard):
		t.Fatalf("%q: no child within %s", r.cmd.Args, binaryHangGuard)
	}
	return 0, 0
}

// finish ends the child and returns how the run ended.
func (r *slotRun) finish(t *testing.T) binaryResult {
	t.Helper()
	_ = r.stdin.Close()
	select {
	case <-r.done:
		return r.res
	case <-time.After(binaryHangGuard):
		t.Fatalf("%q did not end within %s of its child's stdin closing", r.cmd.Args, binaryHangGuard)
	}
	return binaryResult{}
}

func TestRunSlotsRunsThreeAtOnceAndRefusesAnotherNumber(t *testing.T) {
	env := userEnv(t)
	var runs []*slotRun
	var slots []int
	for range 3 {
		r := startHeld(t, env, "--job", "encode", "--slots", "3")
		slot, _ := r.started(t)
		runs, slots = append(runs, r), append(slots, slot)
	}
	slices.Sort(slots)
	if !slices.Equal(slots, []int{0, 1, 2}) {
		t.Errorf("LEASECTL_SLOT of the three runs: %v, want 0, 1, 2", slots)
	}
	if res := leasectlBinary(t, env, "run", "--job", "encode", "--slots", "3", "--", "true"); res.code != exitHeld {
		t.Errorf("a fourth run exited %d, want %d: %s", res.code, exitHeld, res.stderr)
	}
	res := leasectlBinary(t, env, "run", "--job", "encode", "--slots", "2", "--", "true")
	if res.code != exitUsage || !strings.Contains(res.stderr, "--slots 3") || !strings.Contains(res.stderr, "--slots 2") || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
		t.Errorf("a run asking for 2 slots exited %d with %q, want %d and one line naming both", res.code, res.stderr, exitUsage)
	}
	for _, r := range runs {
		if res := r.finish(t); res.code != 0 {
			t.Errorf("a run exited %d: %s", res.code, res.stderr)
		}
	}
	if res := leasectlBinary(t, env, "run", "--job", "encode", "--slots", "2", "--", "true"); res.code != 0 {
		t.Errorf("with no run in flight, a run asking for 2 slots exited %d: %s", res.code, res.stderr)
	}
}

func TestRunSlotsRefusedAboveWhatTheStoreGrants(t *testing.T) {
	// No Redis listens there: the refusal comes before any I/O.
	res := leasectlBinary(t, userEnv(t), "--store", "redis://127.0.0.1:1", "run", "--job", "encode", "--slots", "1001", "--", "true")
	if res.code != exitUsage || !strings.Contains(res.stderr, "--slots 1001") || strings.Count(strings.TrimSpace(res.stderr), "\n") != 0 {
		t.Errorf("exited %d with %q, want %d and one line naming --slots 1001", res.code, res.stderr, exitUsage)
	}
	if res := leasectlBinary(t, userEnv(t), "run", "--job", "encode", "--slots", "0", "--", "true"); res.code != exitUsage {
		t.Errorf("--slots 0 exited %d, want %d: %s", res.code, exitUsage, res.stderr)
	}
}

func TestRunWaitServesWaitersInArrivalOrder(t *testing.T) {
	env := userEnv(t)
	var state string
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "XDG_STATE_HOME="); ok {
			state = v
		}
	}
	holder := startHeld(t, env, "--job", "line")
	holder.started(t)
	store, err := leasestore.Open(context.Background(), "file://"+filepath.Join(state, "leasectl"), "leasectl")
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	// Each waiter starts once the one before is in the queue.
	var waiters []*slotRun
	for i := range 4 {
		waiters = append(waiters, startHeld(t, env, "--job", "line", "--wait"))
		for guard := time.Now().Add(binaryHangGuard); ; time.Sleep(10 * time.Millisecond) {
			st, err := store.Status(context.Background(), "line")
			if err != nil {
				t.Fatal(err)
			}
			if len(st.Queue) == i+1 {
				break
			}
			if time.Now().After(guard) {
				t.Fatalf("waiter %d not in the queue after %s: %+v", i+1, binaryHangGuard, st.Queue)
			}
		}
	}
	holder.finish(t)
	var last int64
	for i, w := range waiters {
		_, token := w.started(t)
		if token <= last {
			t.Errorf("waiter %d got token %d after %d: served out of arrival order", i+1, token, last)
		}
		last = token
		if res := w.finish(t); res.code != 0 {
			t.Errorf("waiter %d exited %d: %s", i+1, res.code, res.stderr)
		}
	}
}

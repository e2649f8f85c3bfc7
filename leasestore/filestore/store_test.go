package filestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
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

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/storetest"
)

// testNamespace has a '/' and capitals, which the file name must encode.
const testNamespace = "Team/nightly"

func openEmbedded(t testing.TB, dir string) *Store {
	t.Helper()
	e, err := Open(dir, testNamespace)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	return e
}

// harness makes each test's store in a folder of its own.
type harness struct{}

func (harness) NewStore(t testing.TB) storetest.Fixture {
	dir := t.TempDir()
	return storetest.Fixture{
		Open: func(t testing.TB) leasestore.Driver { return openEmbedded(t, dir) },
		Wipe: func(t testing.TB) {
			if err := os.RemoveAll(openEmbedded(t, dir).dataDir); err != nil {
				t.Fatalf("wipe: %v", err)
			}
		},
	}
}

func (harness) Abilities() storetest.Abilities {
	return storetest.Abilities{CommonHistoryWords: true}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness{}) }

func BenchmarkStore(b *testing.B) { storetest.Benchmark(b, harness{}) }

func TestEmbeddedFileNames(t *testing.T) {
	dir := t.TempDir()
	e := openEmbedded(t, dir)
	storetest.Acquire(t, e, storetest.Request("job", "a", storetest.LongTTL))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	want := []string{"%54eam%2Fnightly.store"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("files %v, want %v: one folder per namespace, named without '/'", names, want)
	}

	// Namespaces differing only in case must not share a file on a
	// case-insensitive file system.
	lower, err := Open(dir, strings.ToLower(testNamespace))
	if err != nil {
		t.Fatal(err)
	}
	if strings.EqualFold(lower.dataDir, e.dataDir) {
		t.Errorf("namespaces %q and %q map to folders equal but for case: %s, %s", testNamespace, strings.ToLower(testNamespace), e.dataDir, lower.dataDir)
	}
	if _, err := lower.Acquire(storetest.Ctx(t), storetest.Request("job", "b", storetest.LongTTL)); err != nil {
		t.Errorf("Acquire in another namespace: %v (namespaces must not share leases)", err)
	}
	if _, err := Open(dir, "bad namespace"); err == nil {
		t.Error("Open accepted a namespace with a space")
	}
}

func TestEmbeddedPermissions(t *testing.T) {
	// Whatever the umask: a store folder of its owner's alone keeps what
	// the store creates private; a group-writable one shares it with the
	// folder's group. As root, that group is one the folder's creator is
	// not in, as when root runs a team's job first.
	old := syscall.Umask(0o077)
	t.Cleanup(func() { syscall.Umask(old) })
	group := os.Getgid()
	if os.Geteuid() == 0 {
		group = 4242
	}
	tests := []struct {
		name  string
		share bool
		dir   fs.FileMode // of the folders the store creates
		file  fs.FileMode
		group int // of what the store creates; -1: any
		seen  int // paths the store created
	}{
		// state, state/leasectl (Open makes them), and what follows.
		{"private", false, fs.ModeDir | 0o700, 0o600, -1, 9},
		{"shared with a group", true, fs.ModeDir | fs.ModeSetgid | 0o770, 0o660, group, 7},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "state", "leasectl")
			if tc.share {
				if err := os.MkdirAll(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				if err := os.Chown(dir, -1, group); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(dir, 0o770); err != nil { // setgid is not needed
					t.Fatal(err)
				}
			}
			e := openEmbedded(t, dir)
			sub, err := e.Subscribe(storetest.Ctx(t), "job", "")
			if err != nil {
				t.Fatalf("Subscribe: %v", err)
			}
			defer sub.Close()
			storetest.Release(t, e, storetest.Acquire(t, e, storetest.Request("job", "a", storetest.LongTTL)), leasestore.ResultCompleted)

			var seen int
			err = filepath.WalkDir(filepath.Dir(dir), func(path string, d fs.DirEntry, err error) error {
				if err != nil || tc.share && !strings.HasPrefix(path, dir+"/") {
					return err
				}
				fi, err := d.Info()
				if err != nil {
					return err
				}
				want := tc.file
				if d.IsDir() {
					want = tc.dir
				}
				gid := int(fi.Sys().(*syscall.Stat_t).Gid)
				if fi.Mode() != want || tc.group >= 0 && gid != tc.group {
					t.Errorf("%s has mode %s, group %d; want %s, group %d", path, fi.Mode(), gid, want, tc.group)
				}
				seen++
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			// The store folder, its jobs folder with the job's record,
			// its in-flight folder with the folder of the hour the run's
			// liveness expired in, the notify folder and one notify file;
			// nothing left in the making.
			if seen != tc.seen {
				t.Errorf("checked %d paths, want %d", seen, tc.seen)
			}
		})
	}
}

func TestEmbeddedCorruptFile(t *testing.T) {
	damages := []struct {
		name   string
		damage func(valid, other []byte) []byte
	}{
		{"not JSON", func(_, _ []byte) []byte { return []byte(strings.Repeat("not a record\n", 100)) }},
		{"zeros", func(valid, _ []byte) []byte { return make([]byte, len(valid)) }},
		{"truncated", func(valid, _ []byte) []byte { return valid[:len(valid)/2] }},
		{"another job's record", func(_, other []byte) []byte { return other }},
	}
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			e := openEmbedded(t, t.TempDir())
			for i := range 3 {
				storetest.Acquire(t, e, storetest.Request(fmt.Sprintf("job-%d", i), "a", storetest.LongTTL))
			}
			path := e.recordPath(jobKey("job-0"))
			valid, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			other, err := os.ReadFile(e.recordPath(jobKey("job-1")))
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, tc.damage(valid, other), 0o600); err != nil {
				t.Fatal(err)
			}
			// Twice each: a failed call must not leave the job locked.
			for range 2 {
				_, err = e.Acquire(storetest.Ctx(t), storetest.Request("job-0", "b", storetest.LongTTL))
				assertCorrupt(t, path, err)
				_, err = e.Status(storetest.Ctx(t), "job-0")
				assertCorrupt(t, path, err)
			}
			// The other jobs do not pay for it.
			_, err = e.Acquire(storetest.Ctx(t), storetest.Request("job-2", "b", storetest.LongTTL))
			if held := new(leasestore.HeldError); !errors.As(err, &held) || held.Holder != "a" {
				t.Errorf("Acquire of another job = %v, want held by a", err)
			}
		})
	}

	t.Run("moved away starts afresh", func(t *testing.T) {
		e := openEmbedded(t, t.TempDir())
		before := storetest.Acquire(t, e, storetest.Request("job", "a", storetest.LongTTL))
		path := e.recordPath(jobKey("job"))
		if err := os.WriteFile(path, []byte(strings.Repeat("x", 10000)), 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := e.Acquire(storetest.Ctx(t), storetest.Request("job", "b", storetest.LongTTL))
		assertCorrupt(t, path, err)
		if err := os.Rename(path, path+".corrupt"); err != nil {
			t.Fatal(err)
		}
		if after := storetest.Acquire(t, e, storetest.Request("job", "b", storetest.LongTTL)); after.Token <= before.Token {
			t.Errorf("token after the record was moved away %d, not above %d", after.Token, before.Token)
		}
	})
}

// TestEmbeddedTornSlot damages the newest slot of a record, as a writer
// killed halfway through writing it would: the record is the previous
// slot, whole, and the next write does not depend on the damaged one.
func TestEmbeddedTornSlot(t *testing.T) {
	e := openEmbedded(t, t.TempDir())
	l := storetest.Acquire(t, e, storetest.Request("job", "a", storetest.LongTTL))
	path := e.recordPath(jobKey("job"))
	first, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	storetest.Release(t, e, l, leasestore.ResultCompleted) // the second slot
	both, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(both) <= len(first) {
		t.Fatalf("the release's write left the file at %d bytes, not past the first slot's %d", len(both), len(first))
	}
	// Tear the second slot's last bytes.
	if err := os.WriteFile(path, both[:len(both)-10], 0o600); err != nil {
		t.Fatal(err)
	}
	st := storetest.Status(t, e, "job")
	if st.State != leasestore.StateRunning || st.Holder == nil || st.Holder.Token != l.Token {
		t.Fatalf("after the newest slot was torn: state %s holder %+v, want the acquire's record, RUNNING by token %d", st.State, st.Holder, l.Token)
	}
	storetest.Release(t, e, l, leasestore.ResultFailed)
	if st := storetest.Status(t, e, "job"); st.State != leasestore.StateIdle || st.LastOutcome == nil || st.LastOutcome.Result != leasestore.ResultFailed {
		t.Errorf("after a release written past the torn slot: state %s last outcome %+v", st.State, st.LastOutcome)
	}
}

// TestEmbeddedRecordGrows writes records bigger than a slot's usual room
// (a long command line, a full history) and smaller again: each is read
// back whole.
func TestEmbeddedRecordGrows(t *testing.T) {
	e := openEmbedded(t, t.TempDir())
	for i, size := range []int{10, 5000, 20000, 100, 70000, 10, 10} {
		req := storetest.Request("job", fmt.Sprintf("w%d", i), storetest.LongTTL)
		req.Command = []string{"/bin/run", strings.Repeat("x", size)}
		l := storetest.Acquire(t, e, req)
		if st := storetest.Status(t, e, "job"); st.Holder == nil || !slices.Equal(st.Holder.Command, req.Command) || st.Holder.Token != l.Token {
			t.Fatalf("round %d: a command of %d bytes read back as %d bytes", i, size, len(st.Holder.Command[1]))
		}
		storetest.Release(t, e, l, leasestore.ResultCompleted)
	}
	if st := storetest.Status(t, e, "job"); st.Attempts != 7 || len(st.History) != 14 {
		t.Errorf("after 7 runs: %d attempts, %d events; want 7 and 14", st.Attempts, len(st.History))
	}
}

// assertCorrupt checks the error an operator sees for a corrupt record: an
// unavailable store, in one line naming the file and what to do.
func assertCorrupt(t *testing.T, path string, err error) {
	t.Helper()
	if !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("error %v, want ErrUnavailable", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, path) || !strings.Contains(msg, "corrupt") || !strings.Contains(msg, "move it away") {
		t.Errorf("message %q: want one line naming %s, saying it is corrupt and to move it away", msg, path)
	}
}

func TestEmbeddedFolderRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leasectl")
	e := openEmbedded(t, dir)
	before := storetest.Acquire(t, e, storetest.Request("job", "a", storetest.LongTTL))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	after := storetest.Acquire(t, e, storetest.Request("job", "b", storetest.LongTTL))
	if after.Token <= before.Token {
		t.Errorf("token after the folder was removed %d, not above %d", after.Token, before.Token)
	}
	if fi, err := os.Stat(dir); err != nil || fi.Mode().Perm() != 0o700 {
		t.Errorf("re-created folder: %v, %v; want mode 0700", fi, err)
	}
}

func TestEmbeddedContextBoundsLockWait(t *testing.T) {
	e := openEmbedded(t, t.TempDir())
	// Another process's lock, as far as the store can tell: a different
	// open file holding the flock.
	other := openEmbedded(t, e.dir)
	lock, err := other.lockJob(storetest.Ctx(t), jobKey("job"), true)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = e.Acquire(c, storetest.Request("job", "a", storetest.LongTTL))
	if !errors.Is(err, leasestore.ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire while the lock is held past the deadline = %v, want ErrUnavailable wrapping the deadline", err)
	}
	_ = lock.Close()
	storetest.Acquire(t, e, storetest.Request("job", "a", storetest.LongTTL))
}

// Helper processes for TestEmbeddedProcesses: the test binary re-executed
// with these variables set.
const (
	helperDirEnv    = "LEASESTORE_HELPER_DIR"
	helperWorkerEnv = "LEASESTORE_HELPER_WORKER"
	helperRounds    = 30
)

// TestEmbeddedProcesses has several OS processes contend for one job on the
// same files; a sentinel file created exclusively inside the critical
// section catches two holders at once.
func TestEmbeddedProcesses(t *testing.T) {
	if os.Getenv(helperDirEnv) != "" {
		t.Skip("running as a helper process")
	}
	const procs = 6
	dir := t.TempDir()
	var (
		wg     sync.WaitGroup
		starts []func()
		mu     sync.Mutex
		grants int
	)
	for i := range procs {
		cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedHelperProcess$", "-test.v")
		cmd.Env = append(os.Environ(), helperDirEnv+"="+dir, helperWorkerEnv+"="+strconv.Itoa(i))
		stdin, err := cmd.StdinPipe()
		if err != nil {
			t.Fatal(err)
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		starts = append(starts, func() { _ = stdin.Close() })
		wg.Go(func() {
			var result string
			var output strings.Builder
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				output.WriteString(sc.Text() + "\n")
				if line, ok := strings.CutPrefix(sc.Text(), "RESULT "); ok {
					result = line
				}
			}
			if err := cmd.Wait(); err != nil {
				t.Errorf("helper %d: %v\n%s", i, err, output.String())
			}
			n, err := strconv.Atoi(strings.TrimPrefix(result, "grants="))
			if err != nil {
				t.Errorf("helper %d reported %q", i, result)
			}
			mu.Lock()
			grants += n
			mu.Unlock()
		})
	}
	// All helpers are running; closing stdin lets them go at once.
	for _, start := range starts {
		start()
	}
	wg.Wait()
	st := storetest.Status(t, openEmbedded(t, dir), "job")
	if grants == 0 || st.Attempts != int64(grants) {
		t.Errorf("helpers reported %d grants, store counted %d attempts", grants, st.Attempts)
	}
}

// TestEmbeddedHelperProcess is one process of TestEmbeddedProcesses: it
// tries helperRounds times to acquire the job and, when granted, holds it
// briefly inside the sentinel file, then releases it.
func TestEmbeddedHelperProcess(t *testing.T) {
	dir := os.Getenv(helperDirEnv)
	if dir == "" {
		t.Skip("only run by TestEmbeddedProcesses")
	}
	_, _ = bufio.NewReader(os.Stdin).ReadString('\n')
	e := openEmbedded(t, dir)
	worker := "proc-" + os.Getenv(helperWorkerEnv)
	sentinel := filepath.Join(dir, "inside")
	grants := 0
	var last int64
	for range helperRounds {
		l, err := e.Acquire(storetest.Ctx(t), storetest.Request("job", worker, storetest.LongTTL))
		var held *leasestore.HeldError
		if errors.As(err, &held) {
			continue
		}
		if err != nil {
			t.Fatalf("Acquire: %v", err)
		}
		if l.Token <= last {
			t.Errorf("token %d not above this process's previous %d", l.Token, last)
		}
		last = l.Token
		grants++
		f, err := os.OpenFile(sentinel, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o600)
		if err != nil {
			t.Fatalf("two holders at once: %v", err)
		}
		_ = f.Close()
		time.Sleep(time.Millisecond)
		if err := os.Remove(sentinel); err != nil {
			t.Fatal(err)
		}
		storetest.Release(t, e, l, leasestore.ResultCompleted)
	}
	fmt.Printf("RESULT grants=%d\n", grants)
}

// TestEmbeddedWakeLatency measures how soon a subscriber hears of a
// release made by another client; the figure is logged (go test -v), and
// only a hang is a failure.
func TestEmbeddedWakeLatency(t *testing.T) {
	dir := t.TempDir()
	waiter, holder := openEmbedded(t, dir), openEmbedded(t, dir)
	sub, err := waiter.Subscribe(storetest.Ctx(t), "job", "")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const rounds = 50
	var wakes, releases []time.Duration
	for i := range rounds {
		l := storetest.Acquire(t, holder, storetest.Request("job", fmt.Sprintf("w%d", i), storetest.LongTTL))
		start := time.Now()
		storetest.Release(t, holder, l, leasestore.ResultCompleted)
		released := time.Now()
		select {
		case <-sub.Released():
		case <-time.After(storetest.HangGuard):
			t.Fatalf("round %d: no notification within %s", i, storetest.HangGuard)
		}
		wakes = append(wakes, time.Since(start))
		releases = append(releases, released.Sub(start))
	}
	slices.Sort(wakes)
	slices.Sort(releases)
	t.Logf("release call → wake-up over %d rounds: median %s, worst %s (the release call alone: median %s)",
		rounds, wakes[rounds/2], wakes[rounds-1], releases[rounds/2])
}

// TestEmbeddedDiskFull writes to /dev/full, which fails every write with
// ENOSPC as a full disk does.
func TestEmbeddedDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	e := openEmbedded(t, t.TempDir())
	path := e.recordPath(jobKey("job"))
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/dev/full", path); err != nil {
		t.Fatal(err)
	}
	_, err := e.Acquire(storetest.Ctx(t), storetest.Request("job", "a", storetest.LongTTL))
	if !errors.Is(err, leasestore.ErrUnavailable) {
		t.Fatalf("Acquire on a full disk = %v, want ErrUnavailable", err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "disk full") || !strings.Contains(msg, path) {
		t.Errorf("message %q: want one line saying the disk is full and naming %s", msg, path)
	}
}

// Helper processes for TestEmbeddedFrozenTransaction.
const (
	frozenDirEnv  = "LEASESTORE_FROZEN_DIR"
	frozenRoleEnv = "LEASESTORE_FROZEN_ROLE"
)

// TestEmbeddedFrozenTransaction stops (SIGSTOP) a process inside a
// transaction on job A, and has another process work on job B and read the
// whole store meanwhile: nothing it does may wait on A's transaction. Job A
// alone pays for the frozen process.
func TestEmbeddedFrozenTransaction(t *testing.T) {
	if os.Getenv(frozenDirEnv) != "" {
		t.Skip("running as a helper process")
	}
	dir := t.TempDir()
	e := openEmbedded(t, dir)
	// Job A has a live lease and B a crash to count, so that every view
	// has something to read on both sides.
	storetest.Acquire(t, e, storetest.Request("A", "a", storetest.LongTTL))
	storetest.CrashRun(t, e, "B", "crasher", 3)

	frozen := helper(t, dir, "freeze")
	sc := bufio.NewScanner(frozen.stdout)
	if !sc.Scan() || sc.Text() != "HOLDING" {
		t.Fatalf("the freezing helper said %q, want HOLDING", sc.Text())
	}
	if err := frozen.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = frozen.cmd.Process.Kill()
		_ = frozen.cmd.Wait()
	})

	other := helper(t, dir, "work")
	out, err := io.ReadAll(other.stdout)
	if err != nil {
		t.Fatal(err)
	}
	if err := other.cmd.Wait(); err != nil {
		t.Fatalf("the working helper, while another process is frozen inside a transaction on job A: %v\n%s", err, out)
	}

	// The frozen process costs job A its writes, and nothing more: reads of
	// A still answer.
	c, cancel := context.WithTimeout(t.Context(), 100*time.Millisecond)
	defer cancel()
	if _, err := e.Acquire(c, storetest.Request("A", "b", storetest.LongTTL)); !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire of job A while a frozen process is inside its transaction = %v, want a wait cut by the deadline", err)
	}
	if st := storetest.Status(t, e, "A"); st.Holder == nil || st.Holder.Worker != "a" {
		t.Errorf("Status(A) while its transaction is frozen: holder %+v, want a", st.Holder)
	}
}

type helperProc struct {
	cmd    *exec.Cmd
	stdout io.Reader
}

// helper starts this test binary as the helper process of
// TestEmbeddedFrozenTransaction with role.
func helper(t *testing.T, dir, role string) helperProc {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestEmbeddedFrozenHelper$")
	cmd.Env = append(os.Environ(), frozenDirEnv+"="+dir, frozenRoleEnv+"="+role)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	return helperProc{cmd: cmd, stdout: stdout}
}

// frozenBound bounds each call of the working helper: far longer than any of
// them takes, far shorter than a frozen process stays frozen.
const frozenBound = 3 * time.Second

// TestEmbeddedFrozenHelper is a helper process of
// TestEmbeddedFrozenTransaction. As "freeze" it enters a transaction on job
// A, says HOLDING and waits there to be stopped. As "work" it acquires,
// renews and releases job B, counts B's crash, and reads the whole store,
// each call bounded by frozenBound, and fails on any error.
func TestEmbeddedFrozenHelper(t *testing.T) {
	dir := os.Getenv(frozenDirEnv)
	if dir == "" {
		t.Skip("only run by TestEmbeddedFrozenTransaction")
	}
	e := openEmbedded(t, dir)
	if os.Getenv(frozenRoleEnv) == "freeze" {
		release := holdTransaction(t, e, "A")
		defer release()
		fmt.Println("HOLDING")
		select {}
	}
	ctx := func() context.Context {
		c, cancel := context.WithTimeout(context.Background(), frozenBound)
		t.Cleanup(cancel)
		return c
	}
	crashes, err := e.Scan(ctx())
	if err != nil || len(crashes) != 1 || crashes[0].Job != "B" {
		t.Fatalf("Scan = %+v, %v; want B's crash", crashes, err)
	}
	l, err := e.Acquire(ctx(), storetest.Request("B", "b", storetest.LongTTL))
	if err != nil {
		t.Fatalf("Acquire(B): %v", err)
	}
	if err := e.Renew(ctx(), l); err != nil {
		t.Fatalf("Renew(B): %v", err)
	}
	if _, err := e.Status(ctx(), "B"); err != nil {
		t.Fatalf("Status(B): %v", err)
	}
	if _, err := e.Status(ctx(), "A"); err != nil {
		t.Fatalf("Status(A): %v", err)
	}
	if leases, err := e.Leases(ctx()); err != nil || len(leases) != 2 {
		t.Fatalf("Leases = %+v, %v; want A's and B's", leases, err)
	}
	if _, err := e.Counts(ctx()); err != nil {
		t.Fatalf("Counts: %v", err)
	}
	if _, err := e.Quarantined(ctx()); err != nil {
		t.Fatalf("Quarantined: %v", err)
	}
	if err := e.CheckToken(ctx(), "B", l.Token); err != nil {
		t.Fatalf("CheckToken(B): %v", err)
	}
	if err := e.Quarantine(ctx(), "B", leasestore.Note{By: "op", Reason: "test"}); err != nil {
		t.Fatalf("Quarantine(B): %v", err)
	}
	if err := e.ReleaseQuarantine(ctx(), "B", leasestore.Note{By: "op", Reason: "test"}); err != nil {
		t.Fatalf("ReleaseQuarantine(B): %v", err)
	}
	if err := e.Release(ctx(), l, storetest.Outcome(leasestore.ResultCompleted)); err != nil {
		t.Fatalf("Release(B): %v", err)
	}
}

// holdTransaction takes what a write transaction on job holds, and returns
// the function that lets it go.
func holdTransaction(t testing.TB, e *Store, job string) func() {
	t.Helper()
	lock, err := e.lockJob(storetest.Ctx(t), jobKey(job), true)
	if err != nil {
		t.Fatal(err)
	}
	return func() { _ = lock.Close() }
}

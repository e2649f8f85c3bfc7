package leasestore

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// testNamespace has a '/' and capitals, which the file name must encode.
const testNamespace = "Team/nightly"

func openEmbedded(t testing.TB, dir string) *Embedded {
	t.Helper()
	e, err := OpenEmbedded(dir, testNamespace)
	if err != nil {
		t.Fatalf("OpenEmbedded: %v", err)
	}
	return e
}

func TestEmbeddedConformance(t *testing.T) {
	testConformance(t, func(t *testing.T) storeHarness {
		dir := t.TempDir()
		return storeHarness{
			open: func(t *testing.T) Store { return openEmbedded(t, dir) },
			wipe: func(t *testing.T) {
				if err := os.Remove(openEmbedded(t, dir).dbPath); err != nil {
					t.Fatalf("wipe: %v", err)
				}
			},
		}
	})
}

func TestEmbeddedFileNames(t *testing.T) {
	dir := t.TempDir()
	e := openEmbedded(t, dir)
	acquire(t, e, request("job", "a", longTTL))
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, entry := range entries {
		names = append(names, entry.Name())
	}
	want := []string{"%54eam%2Fnightly.db", "%54eam%2Fnightly.lock"}
	if strings.Join(names, " ") != strings.Join(want, " ") {
		t.Errorf("files %v, want %v: one database per namespace, named without '/'", names, want)
	}

	// Namespaces differing only in case must not share a file on a
	// case-insensitive file system.
	lower, err := OpenEmbedded(dir, strings.ToLower(testNamespace))
	if err != nil {
		t.Fatal(err)
	}
	if strings.EqualFold(lower.dbPath, e.dbPath) {
		t.Errorf("namespaces %q and %q map to files equal but for case: %s, %s", testNamespace, strings.ToLower(testNamespace), e.dbPath, lower.dbPath)
	}
	if _, err := lower.Acquire(ctx(t), request("job", "b", longTTL)); err != nil {
		t.Errorf("Acquire in another namespace: %v (namespaces must not share leases)", err)
	}
	if _, err := OpenEmbedded(dir, "bad namespace"); err == nil {
		t.Error("OpenEmbedded accepted a namespace with a space")
	}
}

func TestEmbeddedPermissions(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "state", "leasectl")
	e := openEmbedded(t, dir)
	sub, err := e.Subscribe(ctx(t), "job")
	if err != nil {
		t.Fatalf("Subscribe: %v", err)
	}
	defer sub.Close()
	release(t, e, acquire(t, e, request("job", "a", longTTL)), ResultCompleted)

	var seen int
	err = filepath.WalkDir(filepath.Dir(dir), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = fs.ModeDir | 0o700
		}
		if fi.Mode() != want {
			t.Errorf("%s has mode %s, want %s", path, fi.Mode(), want)
		}
		seen++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	// state, state/leasectl, the database, the lock file, the notify folder
	// and one notify file.
	if seen != 6 {
		t.Errorf("checked %d paths, want 6", seen)
	}
}

func TestEmbeddedCorruptFile(t *testing.T) {
	damages := []struct {
		name   string
		damage func(valid []byte) []byte
	}{
		{"not a database", func([]byte) []byte { return []byte(strings.Repeat("not a bbolt file\n", 1000)) }},
		{"shorter than its meta pages", func([]byte) []byte { return []byte(strings.Repeat("x", 4096)) }},
		{"zeros", func(valid []byte) []byte { return make([]byte, len(valid)) }},
		{"truncated", func(valid []byte) []byte { return valid[:3*4096] }},
	}
	for _, tc := range damages {
		t.Run(tc.name, func(t *testing.T) {
			e := openEmbedded(t, t.TempDir())
			for i := range 30 {
				acquire(t, e, request(fmt.Sprintf("job-%d", i), "a", longTTL))
			}
			valid, err := os.ReadFile(e.dbPath)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(e.dbPath, tc.damage(valid), 0o600); err != nil {
				t.Fatal(err)
			}
			// Twice each: a failed call must not leave the file locked.
			for range 2 {
				_, err = e.Acquire(ctx(t), request("job-0", "b", longTTL))
				assertCorrupt(t, e, err)
				_, err = e.Status(ctx(t), "job-0")
				assertCorrupt(t, e, err)
			}
		})
	}

	t.Run("garbage record", func(t *testing.T) {
		e := openEmbedded(t, t.TempDir())
		acquire(t, e, request("job", "a", longTTL))
		db, err := bolt.Open(e.dbPath, 0o600, nil)
		if err != nil {
			t.Fatal(err)
		}
		err = db.Update(func(tx *bolt.Tx) error { return tx.Bucket(bucketJobs).Put([]byte("job"), []byte("{garbage")) })
		if cerr := db.Close(); err == nil {
			err = cerr
		}
		if err != nil {
			t.Fatal(err)
		}
		err = e.Release(ctx(t), &Lease{Job: "job", Holder: "a", Token: 1}, outcome(ResultCompleted))
		assertCorrupt(t, e, err)
	})

	t.Run("moved away starts afresh", func(t *testing.T) {
		e := openEmbedded(t, t.TempDir())
		if err := os.WriteFile(e.dbPath, []byte(strings.Repeat("x", 10000)), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(e.dbPath, e.dbPath+".corrupt"); err != nil {
			t.Fatal(err)
		}
		acquire(t, e, request("job", "a", longTTL))
	})
}

// assertCorrupt checks the error an operator sees for a corrupt file: an
// unavailable store, in one line naming the file and what to do.
func assertCorrupt(t *testing.T, e *Embedded, err error) {
	t.Helper()
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("error %v, want ErrUnavailable", err)
	}
	msg := err.Error()
	if strings.Contains(msg, "\n") || !strings.Contains(msg, e.dbPath) || !strings.Contains(msg, "corrupt") || !strings.Contains(msg, "move it away") {
		t.Errorf("message %q: want one line naming %s, saying it is corrupt and to move it away", msg, e.dbPath)
	}
}

func TestEmbeddedFolderRemoved(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "leasectl")
	e := openEmbedded(t, dir)
	before := acquire(t, e, request("job", "a", longTTL))
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	after := acquire(t, e, request("job", "b", longTTL))
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
	other := openEmbedded(t, filepath.Dir(e.dbPath))
	unlock, err := other.lock(ctx(t), true)
	if err != nil {
		t.Fatal(err)
	}
	c, cancel := context.WithTimeout(t.Context(), 50*time.Millisecond)
	defer cancel()
	_, err = e.Acquire(c, request("job", "a", longTTL))
	if !errors.Is(err, ErrUnavailable) || !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Acquire while the lock is held past the deadline = %v, want ErrUnavailable wrapping the deadline", err)
	}
	unlock()
	acquire(t, e, request("job", "a", longTTL))
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
	st := status(t, openEmbedded(t, dir), "job")
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
		l, err := e.Acquire(ctx(t), request("job", worker, longTTL))
		var held *HeldError
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
		release(t, e, l, ResultCompleted)
	}
	fmt.Printf("RESULT grants=%d\n", grants)
}

// TestEmbeddedWakeLatency measures how soon a subscriber hears of a
// release made by another client; the figure is logged (go test -v), and
// only a hang is a failure.
func TestEmbeddedWakeLatency(t *testing.T) {
	dir := t.TempDir()
	waiter, holder := openEmbedded(t, dir), openEmbedded(t, dir)
	sub, err := waiter.Subscribe(ctx(t), "job")
	if err != nil {
		t.Fatal(err)
	}
	defer sub.Close()
	const rounds = 50
	var wakes, releases []time.Duration
	for i := range rounds {
		l := acquire(t, holder, request("job", fmt.Sprintf("w%d", i), longTTL))
		start := time.Now()
		release(t, holder, l, ResultCompleted)
		released := time.Now()
		select {
		case <-sub.Released():
		case <-time.After(hangGuard):
			t.Fatalf("round %d: no notification within %s", i, hangGuard)
		}
		wakes = append(wakes, time.Since(start))
		releases = append(releases, released.Sub(start))
	}
	slices.Sort(wakes)
	slices.Sort(releases)
	t.Logf("release call → wake-up over %d rounds: median %s, worst %s (the release call alone: median %s)",
		rounds, wakes[rounds/2], wakes[rounds-1], releases[rounds/2])
}

func BenchmarkEmbeddedAcquireRelease(b *testing.B) {
	e := openEmbedded(b, b.TempDir())
	c := context.Background()
	for i := 0; b.Loop(); i++ {
		l, err := e.Acquire(c, request("job", "w"+strconv.Itoa(i), longTTL))
		if err != nil {
			b.Fatal(err)
		}
		if err := e.Release(c, l, outcome(ResultCompleted)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkEmbeddedRenew(b *testing.B) {
	e := openEmbedded(b, b.TempDir())
	c := context.Background()
	l, err := e.Acquire(c, request("job", "w", longTTL))
	if err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if err := e.Renew(c, l); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEmbeddedStatus is the cost of a read: lock, open read-only, one
// transaction, close.
func BenchmarkEmbeddedStatus(b *testing.B) {
	e := openEmbedded(b, b.TempDir())
	c := context.Background()
	if _, err := e.Acquire(c, request("job", "w", longTTL)); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := e.Status(c, "job"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkEmbeddedScan scans a store with many live leases, with and
// without crashed runs to count: its cost follows the crashed runs.
func BenchmarkEmbeddedScan(b *testing.B) {
	for _, tc := range []struct{ live, crashed int }{{10000, 0}, {10000, 100}} {
		b.Run(fmt.Sprintf("live=%d/crashed=%d", tc.live, tc.crashed), func(b *testing.B) {
			e := openEmbedded(b, b.TempDir())
			c := context.Background()
			grant(b, e, "live", tc.live, longTTL)
			for b.Loop() {
				b.StopTimer()
				// A negative TTL makes runs whose liveness already expired.
				grant(b, e, "crashed", tc.crashed, -time.Second)
				b.StartTimer()
				found, err := e.Scan(c)
				if err != nil || len(found) != tc.crashed {
					b.Fatalf("Scan found %d, %v; want %d", len(found), err, tc.crashed)
				}
			}
		})
	}
}

// grant acquires n jobs named prefix-0.. in one transaction.
func grant(b *testing.B, e *Embedded, prefix string, n int, ttl time.Duration) {
	b.Helper()
	err := e.update(context.Background(), "bench", func(t *txn) error {
		for i := range n {
			req := request(prefix+"-"+strconv.Itoa(i), "w", ttl)
			req.MaxCrashes = math.MaxInt32
			if _, err := t.acquire(req); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		b.Fatal(err)
	}
}

// TestEmbeddedDiskFull writes to /dev/full, which fails every write with
// ENOSPC as a full disk does.
func TestEmbeddedDiskFull(t *testing.T) {
	if _, err := os.Stat("/dev/full"); err != nil {
		t.Skip("no /dev/full on this system")
	}
	e := openEmbedded(t, t.TempDir())
	if err := os.Symlink("/dev/full", e.dbPath); err != nil {
		t.Fatal(err)
	}
	_, err := e.Acquire(ctx(t), request("job", "a", longTTL))
	if !errors.Is(err, ErrUnavailable) {
		t.Fatalf("Acquire on a full disk = %v, want ErrUnavailable", err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "disk full") || !strings.Contains(msg, e.dbPath) {
		t.Errorf("message %q: want one line saying the disk is full and naming %s", msg, e.dbPath)
	}
}

package initbudget

import (
	"bytes"
	"errors"
	"flag"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/internal/testenv"
)

var update = flag.Bool("update", false, "measure leasectl's package init and rewrite testdata/initbudget.txt")

const budgetFile = "testdata/initbudget.txt"

// Run counts. The check starts with firstRuns and, while it is over budget,
// doubles them up to maxRuns before it fails: a loaded machine inflates
// some runs, never deflates one, so more runs can only bring the least
// times down to the init's own cost, and a real regression stays over
// budget however many runs are taken. A refresh takes updateRuns, so that
// the recorded floor is as low as the check can reach.
const (
	firstRuns  = 30
	maxRuns    = 480
	updateRuns = 240
)

// TestMain removes the binary that TestInitBudget built.
func TestMain(m *testing.M) {
	code := m.Run()
	testenv.Cleanup()
	os.Exit(code)
}

// TestInitBudget fails when `leasectl version` spends more time in package
// init than testdata/initbudget.txt allows (see the package doc).
func TestInitBudget(t *testing.T) {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	mins := Inits{}
	if *update {
		measure(t, bin, mins, updateRuns)
		b := &Budget{Toolchain: toolchain(), Runs: updateRuns, Inits: mins}
		var buf bytes.Buffer
		if _, err := b.WriteTo(&buf); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(budgetFile, buf.Bytes(), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Logf("wrote %s: %d packages, %s ms in total", budgetFile, len(mins), formatMS(mins.Total()))
		return
	}
	f, err := os.Open(budgetFile)
	if err != nil {
		t.Fatalf("%v (create it with: go test ./internal/initbudget -update)", err)
	}
	budget, err := ReadBudget(f)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	runs := 0
	for next := firstRuns; ; next = min(2*next, maxRuns) {
		measure(t, bin, mins, next-runs)
		runs = next
		err = budget.Check(mins)
		if err == nil || runs == maxRuns {
			break
		}
		t.Logf("over budget after %d runs (%s ms measured), measuring more", runs, formatMS(mins.Total()))
	}
	if err != nil {
		t.Fatalf("%v\nleast times over %d runs of GODEBUG=inittrace=1 leasectl version; measured with %s.\n"+
			"If the growth is intended, refresh the budget and say why in the commit:\n\tgo test ./internal/initbudget -update",
			err, runs, toolchain())
	}
	slow := budget.Slowdown(mins)
	atBudgetSpeed := time.Duration(float64(mins.Total()) / slow)
	t.Logf("package init %s ms over %d packages (least of %d runs; standard library at %.2fx its recorded time, so %s ms at the budget's speed); budget %s ms + %s ms",
		formatMS(mins.Total()), len(mins), runs, slow, formatMS(atBudgetSpeed), formatMS(budget.Total()), formatMS(Slack))
	if atBudgetSpeed < budget.Total()-Slack {
		// Shrinking is welcome, but the headroom it leaves would let the
		// next growth through unseen.
		t.Logf("package init shrank by more than %s ms: refresh the budget to keep the headroom small (go test ./internal/initbudget -update)", formatMS(Slack))
	}
}

// measure runs `GODEBUG=inittrace=1 bin version` n times and folds each
// run's package init into mins.
func measure(t *testing.T, bin string, mins Inits, n int) {
	t.Helper()
	for range n {
		cmd := exec.Command(bin, "version")
		// A later GODEBUG replaces one the environment may set.
		cmd.Env = append(os.Environ(), "GODEBUG=inittrace=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("%s version: %v\n%s", bin, err, stderr.Bytes())
		}
		run, err := ParseTrace(&stderr)
		if err != nil {
			t.Fatal(err)
		}
		mins.Min(run)
	}
}

// toolchain is the Go version and platform that builds the binary.
func toolchain() string {
	return runtime.Version() + " " + runtime.GOOS + "/" + runtime.GOARCH
}

func TestParseTrace(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    Inits
		wantErr bool
	}{
		{
			name: "init lines among other output",
			in: "init runtime @0.030 ms, 0.12 ms clock, 0 bytes, 0 allocs\n" +
				"init github.com/rs/zerolog @1.7 ms, 0.053 ms clock, 592 bytes, 8 allocs\n" +
				"leasectl dev (commit none, built unknown)\n" +
				"init sync @0.55 ms, 0 ms clock, 0 bytes, 0 allocs\n",
			want: Inits{"runtime": 120 * time.Microsecond, "github.com/rs/zerolog": 53 * time.Microsecond, "sync": 0},
		},
		{
			name: "whole milliseconds above 10 ms",
			in:   "init example.com/slow @3.5 ms, 12 ms clock, 48 bytes, 2 allocs\n",
			want: Inits{"example.com/slow": 12 * time.Millisecond},
		},
		{
			name: "a line about init that is no trace line",
			in:   "init failed: no config\ninit math @0.36 ms, 0.004 ms clock, 0 bytes, 0 allocs\n",
			want: Inits{"math": 4 * time.Microsecond},
		},
		{name: "no trace at all", in: "leasectl dev\n", wantErr: true},
		{name: "clock is not a number", in: "init math @0.36 ms, x ms clock, 0 bytes, 0 allocs\n", wantErr: true},
		{name: "negative clock", in: "init math @0.36 ms, -1 ms clock, 0 bytes, 0 allocs\n", wantErr: true},
		{name: "format changed", in: "init math @0.36 ms, 0.004 us clock, 0 bytes, 0 allocs\n", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseTrace(strings.NewReader(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("ParseTrace error = %v, want error %v", err, tt.wantErr)
			}
			if !tt.wantErr && !maps.Equal(got, tt.want) {
				t.Errorf("ParseTrace = %v, want %v", got, tt.want)
			}
		})
	}
	if _, err := ParseTrace(strings.NewReader("")); !errors.Is(err, ErrNoTrace) {
		t.Errorf("ParseTrace of empty output = %v, want ErrNoTrace", err)
	}
}

func TestMinKeepsTheLeastTimeOfEveryPackage(t *testing.T) {
	m := Inits{}
	m.Min(Inits{"a": 50 * time.Microsecond, "b": 10 * time.Microsecond})
	m.Min(Inits{"a": 30 * time.Microsecond, "b": 90 * time.Microsecond, "c": 5 * time.Microsecond})
	want := Inits{"a": 30 * time.Microsecond, "b": 10 * time.Microsecond, "c": 5 * time.Microsecond}
	if !maps.Equal(m, want) {
		t.Errorf("Min = %v, want %v", m, want)
	}
	if got := m.Total(); got != 45*time.Microsecond {
		t.Errorf("Total = %v, want 45µs", got)
	}
}

func TestCheck(t *testing.T) {
	us := time.Microsecond
	// Two standard-library packages set the machine's speed; the others are
	// what a change to leasectl can make grow. Total 108µs.
	budget := &Budget{Toolchain: "go1.26.8 linux/amd64", Runs: 30, Inits: Inits{
		"runtime": 30 * us, "unicode": 20 * us, "github.com/mattn/go-runewidth": 45 * us, "github.com/redis/go-redis/v9": 13 * us,
	}}
	// at returns the budget's times times slow, plus extra.
	at := func(slow float64, extra Inits) Inits {
		m := Inits{}
		for p, d := range budget.Inits {
			m[p] = time.Duration(float64(d) * slow)
		}
		for p, d := range extra {
			m[p] = d
		}
		return m
	}
	tests := []struct {
		name      string
		measured  Inits
		wantOver  bool
		wantNew   []string // OverError.New
		wantFirst string   // first of OverError.Grew
	}{
		{name: "as recorded", measured: at(1, nil)},
		{
			name:     "grown by exactly the slack",
			measured: at(1, Inits{"github.com/mattn/go-runewidth": 345 * us}),
		},
		{
			name:      "grown by more than the slack",
			measured:  at(1, Inits{"github.com/mattn/go-runewidth": 300 * us, "github.com/redis/go-redis/v9": 70 * us}),
			wantOver:  true,
			wantFirst: "github.com/mattn/go-runewidth",
		},
		{
			name:     "a new package within the slack",
			measured: at(1, Inits{"github.com/jackc/pgx/v5": 250 * us}),
		},
		{
			name:      "a new etcd client",
			measured:  at(1, Inits{"go.etcd.io/etcd/client/v3": 4 * time.Millisecond}),
			wantOver:  true,
			wantNew:   []string{"go.etcd.io/etcd/client/v3"},
			wantFirst: "go.etcd.io/etcd/client/v3",
		},
		{
			name:      "a new package over the slack while others shrank",
			measured:  Inits{"runtime": 30 * us, "unicode": 20 * us, "github.com/jackc/pgx/v5": 310 * us},
			wantOver:  true,
			wantNew:   []string{"github.com/jackc/pgx/v5"},
			wantFirst: "github.com/jackc/pgx/v5",
		},
		{
			name:      "a standard-library package new to leasectl",
			measured:  at(1, Inits{"net/http": 350 * us}),
			wantOver:  true,
			wantNew:   []string{"net/http"},
			wantFirst: "net/http",
		},
		{name: "packages gone", measured: Inits{"runtime": 30 * us}},
		{name: "a machine five times slower", measured: at(5, nil)},
		{
			name:      "a machine five times slower and a change that adds 0.4 ms",
			measured:  at(5, Inits{"github.com/jackc/pgx/v5": 5 * 400 * us}),
			wantOver:  true,
			wantNew:   []string{"github.com/jackc/pgx/v5"},
			wantFirst: "github.com/jackc/pgx/v5",
		},
		{
			name:     "a machine twice as fast and a change that adds 0.2 ms",
			measured: at(0.5, Inits{"github.com/jackc/pgx/v5": 100 * us}),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := budget.Check(tt.measured)
			var over *OverError
			if errors.As(err, &over) != tt.wantOver {
				t.Fatalf("Check = %v, want over budget: %v", err, tt.wantOver)
			}
			if !tt.wantOver {
				return
			}
			var gotNew []string
			for _, g := range over.New {
				gotNew = append(gotNew, g.Package)
			}
			if strings.Join(gotNew, ",") != strings.Join(tt.wantNew, ",") {
				t.Errorf("New = %v, want %v", gotNew, tt.wantNew)
			}
			if len(over.Grew) == 0 || over.Grew[0].Package != tt.wantFirst {
				t.Errorf("Grew = %v, want %s first", over.Grew, tt.wantFirst)
			}
			if !strings.Contains(err.Error(), tt.wantFirst) {
				t.Errorf("message does not name %s:\n%v", tt.wantFirst, err)
			}
		})
	}
}

func TestSlowdown(t *testing.T) {
	us := time.Microsecond
	budget := &Budget{Toolchain: "go", Inits: Inits{
		"runtime": 30 * us, "vendor/golang.org/x/sys/cpu": 10 * us, "main": 100 * us, "github.com/rs/zerolog": 12 * us,
	}}
	tests := []struct {
		name     string
		measured Inits
		want     float64
	}{
		{"as recorded", Inits{"runtime": 30 * us, "vendor/golang.org/x/sys/cpu": 10 * us}, 1},
		{"the standard library twice as slow", Inits{"runtime": 60 * us, "vendor/golang.org/x/sys/cpu": 20 * us}, 2},
		{"only the packages in both count", Inits{"runtime": 60 * us, "net/http": 500 * us}, 2},
		{"leasectl's own packages and main do not count", Inits{"runtime": 30 * us, "vendor/golang.org/x/sys/cpu": 10 * us, "main": 900 * us, "github.com/rs/zerolog": 900 * us}, 1},
		{"no standard-library package in both", Inits{"github.com/rs/zerolog": 24 * us}, 1},
		{"standard-library inits too fast to measure", Inits{"runtime": 0, "vendor/golang.org/x/sys/cpu": 0}, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := budget.Slowdown(tt.measured); got != tt.want {
				t.Errorf("Slowdown = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestOverErrorNamesAtMostFivePackages(t *testing.T) {
	measured := Inits{}
	for _, p := range []string{"a", "b", "c", "d", "e", "f", "g"} {
		measured[p] = 100 * time.Microsecond
	}
	err := (&Budget{Toolchain: "go", Inits: Inits{"a": 0}}).Check(measured)
	var over *OverError
	if !errors.As(err, &over) {
		t.Fatalf("Check = %v, want *OverError", err)
	}
	if len(over.Grew) != maxGrew {
		t.Errorf("Grew has %d packages, want %d: %v", len(over.Grew), maxGrew, over.Grew)
	}
}

func TestBudgetFileRoundTrip(t *testing.T) {
	b := &Budget{Toolchain: "go1.26.8 linux/amd64", Runs: 240, Inits: Inits{
		"runtime": 24 * time.Microsecond, "golang.org/x/sys/cpu": 67 * time.Microsecond, "sync": 0,
	}}
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "\ntotal 0.091\n") {
		t.Errorf("file has no total 0.091 line:\n%s", buf.String())
	}
	got, err := ReadBudget(&buf)
	if err != nil {
		t.Fatal(err)
	}
	if got.Toolchain != b.Toolchain || got.Runs != b.Runs || !maps.Equal(got.Inits, b.Inits) {
		t.Errorf("ReadBudget(WriteTo(b)) = %+v, want %+v", got, b)
	}
}

func TestReadBudgetRejects(t *testing.T) {
	tests := []struct{ name, in string }{
		{"a total that is not the sum", "toolchain go\nruns 1\ntotal 0.100\ninit a 0.050\ninit b 0.040\n"},
		{"no total", "toolchain go\nruns 1\ninit a 0.050\n"},
		{"no toolchain", "runs 1\ntotal 0.050\ninit a 0.050\n"},
		{"no package", "toolchain go\nruns 1\ntotal 0\n"},
		{"a package twice", "toolchain go\nruns 1\ntotal 0.100\ninit a 0.050\ninit a 0.050\n"},
		{"an unknown line", "toolchain go\ntotal 0.050\ninit a 0.050\nbudget 1\n"},
		{"a time that is no number", "toolchain go\ntotal 0.050\ninit a fast\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if b, err := ReadBudget(strings.NewReader(tt.in)); err == nil {
				t.Errorf("ReadBudget = %+v, want an error", b)
			}
		})
	}
}

// TestBudgetFileIsCurrent checks that the committed file parses and was
// written by this package's WriteTo, so a refresh changes only figures.
func TestBudgetFileIsCurrent(t *testing.T) {
	data, err := os.ReadFile(filepath.FromSlash(budgetFile))
	if err != nil {
		t.Fatal(err)
	}
	b, err := ReadBudget(bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if _, err := b.WriteTo(&buf); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf.Bytes(), data) {
		t.Errorf("%s is not in WriteTo's form; refresh it with go test ./internal/initbudget -update", budgetFile)
	}
}

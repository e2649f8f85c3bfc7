package initbudget

import (
	"bufio"
	"bytes"
	"cmp"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Slack is how much package init a change may add before the check fails,
// at the budget's machine speed: to the total, or in one package the budget
// does not list. It trades sensitivity for stability. Smaller, and the
// residual noise of the check (the total of the least of 30 runs, over its
// standard-library part, moves by about 5%, 0.03 ms, on a 2-core machine
// shared with other work) could come close to failing a change that added
// nothing; larger, and a driver like pgx (about 1 ms of init) could come in
// together with other growth unnoticed. Every leasectl process pays it, the
// watchdog too.
const Slack = 300 * time.Microsecond

// maxGrew is how many of the packages that grew most an OverError names.
const maxGrew = 5

// Budget is leasectl's recorded package init, as kept in
// testdata/initbudget.txt.
type Budget struct {
	// Toolchain is the Go version and platform that measured it, e.g.
	// "go1.26.8 linux/amd64": the standard library's inits change with Go.
	Toolchain string
	// Runs is how many runs each package's least time was taken over.
	Runs int
	// Inits is each package's least clock time.
	Inits Inits
}

// Total is the sum of the recorded times.
func (b *Budget) Total() time.Duration { return b.Inits.Total() }

// ReadBudget parses a budget file: '#' comments, then the lines
//
//	toolchain go1.26.8 linux/amd64
//	runs 200
//	total 0.555
//	init github.com/rs/zerolog 0.014
//
// with one init line per package, times in milliseconds. The total must be
// the sum of the init lines, so that a hand edit cannot make them disagree.
func ReadBudget(r io.Reader) (*Budget, error) {
	b := &Budget{Inits: Inits{}}
	var total time.Duration
	haveTotal := false
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		key, rest, _ := strings.Cut(line, " ")
		f := strings.Fields(rest)
		var err error
		switch {
		case key == "toolchain" && len(f) > 0:
			b.Toolchain = strings.Join(f, " ")
		case key == "runs" && len(f) == 1:
			b.Runs, err = strconv.Atoi(f[0])
		case key == "total" && len(f) == 1:
			total, err = parseMS(f[0])
			haveTotal = true
		case key == "init" && len(f) == 2:
			if _, dup := b.Inits[f[0]]; dup {
				err = fmt.Errorf("package %s listed twice", f[0])
				break
			}
			b.Inits[f[0]], err = parseMS(f[1])
		default:
			err = fmt.Errorf("want toolchain, runs, total or init PACKAGE MS: %q", line)
		}
		if err != nil {
			return nil, fmt.Errorf("initbudget: line %d: %w", n, err)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch {
	case len(b.Inits) == 0:
		return nil, fmt.Errorf("initbudget: no init line")
	case b.Toolchain == "":
		return nil, fmt.Errorf("initbudget: no toolchain line")
	case !haveTotal:
		return nil, fmt.Errorf("initbudget: no total line")
	case formatMS(total) != formatMS(b.Total()):
		return nil, fmt.Errorf("initbudget: total %s ms is not the sum of the init lines, %s ms", formatMS(total), formatMS(b.Total()))
	}
	return b, nil
}

// WriteTo writes b in the form ReadBudget reads, packages sorted by import
// path so that a refresh shows as a small diff.
func (b *Budget) WriteTo(w io.Writer) (int64, error) {
	var buf bytes.Buffer
	fmt.Fprintf(&buf, `# leasectl's package init: per package, the least clock time over %d runs
# of GODEBUG=inittrace=1 leasectl version, in milliseconds. The watchdog that
# leasectl run starts is the same binary and pays the same. make test fails
# when the total grows by more than %s ms, or a package not listed here takes
# more than that, once measured times are scaled back to the speed of the
# machine that wrote this file, by its standard-library packages. Refresh
# (and say why in the commit):
#
#	go test ./internal/initbudget -update
#
`, b.Runs, formatMS(Slack))
	fmt.Fprintf(&buf, "toolchain %s\nruns %d\ntotal %s\n", b.Toolchain, b.Runs, formatMS(b.Total()))
	for _, pkg := range slices.Sorted(maps.Keys(b.Inits)) {
		fmt.Fprintf(&buf, "init %s %s\n", pkg, formatMS(b.Inits[pkg]))
	}
	return buf.WriteTo(w)
}

// Slowdown is how much slower the machine runs package init now than when
// the budget was recorded: the clock time of the standard library's
// packages that both list, measured now over recorded. Their code is the
// toolchain's, so a change to leasectl cannot make them slower or faster:
// their ratio is the machine's. A 2-core machine shared with other work
// drifts by a third for tens of seconds at a time, and a CI machine may be
// slower than the one that recorded the budget; the ratio of the whole
// total to its standard-library part stays within a few percent through
// both. Slowdown is 1 when no standard-library package took measurable time
// in both.
func (b *Budget) Slowdown(measured Inits) float64 {
	var now, rec time.Duration
	for pkg, d := range b.Inits {
		if m, ok := measured[pkg]; ok && isStd(pkg) {
			now += m
			rec += d
		}
	}
	if now <= 0 || rec <= 0 {
		return 1
	}
	return float64(now) / float64(rec)
}

// isStd reports whether pkg is in the standard library (its vendored
// packages included): its first path element has no dot. The program's own
// main package is not.
func isStd(pkg string) bool {
	first, _, _ := strings.Cut(pkg, "/")
	return pkg != "main" && !strings.Contains(first, ".")
}

// Growth is one package's init time against the budget.
type Growth struct {
	// Package is the import path.
	Package string
	// Budget is the recorded time, zero for a package the budget does not
	// list.
	Budget time.Duration
	// Measured is the least time measured now, at the recorded speed
	// (divided by the Slowdown).
	Measured time.Duration
	// New is set for a package the budget does not list.
	New bool
}

// Delta is how much the package grew.
func (g Growth) Delta() time.Duration { return g.Measured - g.Budget }

// String reads "net/http +0.020 ms (0.016 -> 0.036 ms)".
func (g Growth) String() string {
	if g.New {
		return fmt.Sprintf("%s +%s ms (not in the budget)", g.Package, formatMS(g.Delta()))
	}
	return fmt.Sprintf("%s %+.3f ms (%s -> %s ms)", g.Package, float64(g.Delta().Round(time.Microsecond))/float64(time.Millisecond), formatMS(g.Budget), formatMS(g.Measured))
}

// OverError is returned by Check when the measured package init exceeds the
// budget.
type OverError struct {
	// Budget is the recorded total.
	Budget time.Duration
	// Measured is the measured total at the recorded speed (divided by
	// Slowdown); Raw is as measured.
	Measured, Raw time.Duration
	// Slowdown is Budget.Slowdown of the measurement.
	Slowdown float64
	// Toolchain is the budget's.
	Toolchain string
	// Grew lists the packages that grew most, largest growth first.
	Grew []Growth
	// New lists the packages the budget does not list that take more than
	// Slack on their own.
	New []Growth
}

// Error names the totals, then the packages that grew most.
func (e *OverError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "package init totals %s ms at the budget's machine speed (%s ms measured, standard library inits at %.2fx their recorded time), ",
		formatMS(e.Measured), formatMS(e.Raw), e.Slowdown)
	if e.Measured > e.Budget+Slack {
		fmt.Fprintf(&b, "more than the budget's %s ms + %s ms (recorded with %s)", formatMS(e.Budget), formatMS(Slack), e.Toolchain)
	} else {
		fmt.Fprintf(&b, "within the budget's %s ms + %s ms, but", formatMS(e.Budget), formatMS(Slack))
	}
	for _, g := range e.New {
		fmt.Fprintf(&b, "\n  package %s is not in the budget and takes %s ms of init, more than %s ms on its own", g.Package, formatMS(g.Measured), formatMS(Slack))
	}
	if len(e.Grew) > 0 {
		b.WriteString("\n  grew most:")
		for _, g := range e.Grew {
			fmt.Fprintf(&b, "\n    %s", g)
		}
	}
	return b.String()
}

// Check compares measured package init with the budget, at the budget's
// machine speed: every measured time is divided by the Slowdown first. It
// returns an *OverError when the total exceeds the budget's by more than
// Slack, or when a package the budget does not list takes more than Slack;
// otherwise nil. A package that shrank or went away makes room for others.
func (b *Budget) Check(measured Inits) error {
	slow := b.Slowdown(measured)
	e := &OverError{Budget: b.Total(), Raw: measured.Total(), Slowdown: slow, Toolchain: b.Toolchain}
	var grew []Growth
	for pkg, d := range measured {
		rec, listed := b.Inits[pkg]
		g := Growth{Package: pkg, Budget: rec, Measured: time.Duration(float64(d) / slow), New: !listed}
		e.Measured += g.Measured
		if g.New && g.Measured > Slack {
			e.New = append(e.New, g)
		}
		if g.Delta() > 0 {
			grew = append(grew, g)
		}
	}
	if e.Measured <= e.Budget+Slack && len(e.New) == 0 {
		return nil
	}
	byGrowth := func(x, y Growth) int {
		return cmp.Or(cmp.Compare(y.Delta(), x.Delta()), cmp.Compare(x.Package, y.Package))
	}
	slices.SortFunc(grew, byGrowth)
	slices.SortFunc(e.New, byGrowth)
	e.Grew = grew[:min(len(grew), maxGrew)]
	return e
}

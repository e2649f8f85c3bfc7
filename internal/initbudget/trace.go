package initbudget

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"strconv"
	"strings"
	"time"
)

// Inits maps a package's import path to the clock time its init took.
type Inits map[string]time.Duration

// ErrNoTrace is returned by ParseTrace when the output holds no init line:
// the program did not run with GODEBUG=inittrace=1.
var ErrNoTrace = errors.New("initbudget: no inittrace line in the output")

// ParseTrace reads what a Go program started with GODEBUG=inittrace=1 writes
// to stderr and returns the clock time of each package's init. A trace line
// reads
//
//	init github.com/rs/zerolog @1.7 ms, 0.053 ms clock, 592 bytes, 8 allocs
//
// Other lines are skipped. A line that starts like a trace line but does
// not parse is an error, and so is a trace without any init line.
func ParseTrace(r io.Reader) (Inits, error) {
	inits := Inits{}
	sc := bufio.NewScanner(r)
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) < 3 || f[0] != "init" || !strings.HasPrefix(f[2], "@") {
			continue
		}
		if len(f) < 7 || f[3] != "ms," || f[5] != "ms" || f[6] != "clock," {
			return nil, fmt.Errorf("initbudget: unexpected inittrace line %q", line)
		}
		d, err := parseMS(f[4])
		if err != nil {
			return nil, fmt.Errorf("initbudget: clock time of %s in %q: %w", f[1], line, err)
		}
		inits[f[1]] += d
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if len(inits) == 0 {
		return nil, ErrNoTrace
	}
	return inits, nil
}

// Min lowers each of m's clock times to the one in run when that is less,
// and adds the packages m does not have yet. Folding many runs into one
// Inits gives each package's least time: noise on a busy machine only ever
// adds time, so the least of many runs is the init's own cost.
func (m Inits) Min(run Inits) {
	for pkg, d := range run {
		if old, ok := m[pkg]; !ok || d < old {
			m[pkg] = d
		}
	}
}

// Total is the sum of all clock times.
func (m Inits) Total() time.Duration {
	var sum time.Duration
	for d := range maps.Values(m) {
		sum += d
	}
	return sum
}

// parseMS parses a non-negative number of milliseconds ("0.053", "12").
func parseMS(s string) (time.Duration, error) {
	ms, err := strconv.ParseFloat(s, 64)
	if err != nil || ms < 0 || math.IsInf(ms, 0) || math.IsNaN(ms) {
		return 0, fmt.Errorf("not a number of milliseconds: %q", s)
	}
	return time.Duration(math.Round(ms * float64(time.Millisecond))), nil
}

// formatMS formats d in milliseconds with microsecond precision, as
// inittrace does.
func formatMS(d time.Duration) string {
	return strconv.FormatFloat(float64(d.Round(time.Microsecond))/float64(time.Millisecond), 'f', 3, 64)
}

package chaos

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// holder is one child's life as its record file tells it.
type holder struct {
	file  string
	token int64
	asked int64 // CLOCK_MONOTONIC ns before its run was started (0: unknown)
	first int64 // ... of its start record
	last  int64 // ... of its last record: it was alive at least until then
	ended bool  // it wrote an end record (it was not killed)
}

// readHolders parses every child's record file in dir. A torn last line (a
// kill in mid-write) is ignored; anything else malformed is an error.
func readHolders(dir string) ([]holder, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.rec"))
	if err != nil {
		return nil, fmt.Errorf("listing records: %w", err)
	}
	var hs []holder
	for _, name := range files {
		h, err := readHolder(name)
		if err != nil {
			return nil, err
		}
		if h != nil {
			hs = append(hs, *h)
		}
	}
	return hs, nil
}

// readHolder parses one record file; it returns nil for a child killed
// before its start record was complete.
func readHolder(name string) (*holder, error) {
	b, err := os.ReadFile(name)
	if err != nil {
		return nil, fmt.Errorf("reading records: %w", err)
	}
	text := string(b)
	if i := strings.LastIndexByte(text, '\n'); i < len(text)-1 {
		text = text[:i+1] // a torn last line
	}
	sc := bufio.NewScanner(strings.NewReader(text))
	var h *holder
	for n := 1; sc.Scan(); n++ {
		token, kind, at, asked, ok := parseRecord(sc.Text())
		if !ok {
			return nil, fmt.Errorf("%s:%d: malformed record %q", name, n, sc.Text())
		}
		switch {
		case h == nil && kind != recStart:
			return nil, fmt.Errorf("%s:%d: first record is %q, not %q", name, n, kind, recStart)
		case h == nil:
			h = &holder{file: filepath.Base(name), token: token, asked: asked, first: at}
		case token != h.token || at < h.last || h.ended:
			return nil, fmt.Errorf("%s:%d: record %q does not follow the child's earlier ones", name, n, sc.Text())
		}
		h.last = at
		h.ended = kind == recEnd
	}
	return h, nil
}

// parseRecord parses one line of a record file: "<token> <kind> <ns>", a
// start record with "<asked>" after them.
func parseRecord(line string) (token int64, kind string, at, asked int64, ok bool) {
	f := strings.Fields(line)
	if len(f) != 3 && (len(f) != 4 || f[1] != recStart) {
		return 0, "", 0, 0, false
	}
	token, err1 := strconv.ParseInt(f[0], 10, 64)
	at, err2 := strconv.ParseInt(f[2], 10, 64)
	var err3 error
	if len(f) == 4 {
		asked, err3 = strconv.ParseInt(f[3], 10, 64)
	}
	return token, f[1], at, asked, err1 == nil && err2 == nil && err3 == nil
}

// violations returns every breach of the contract in hs, a job's children
// run with slots slots. Ordered by start: a holder that started while slots
// earlier ones were still alive breaks the job's limit, mutual exclusion
// with one slot (checked only when limited); a token out of grant order
// breaks fencing (see fencing).
func violations(hs []holder, slots int, limited bool) []string {
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(a, b holder) int { return int64Cmp(a.first, b.first) })
	out := fencing(hs, slots)
	if limited {
		out = append(out, crowding(hs, slots)...)
	}
	return out
}

// fencing returns the breaches of token order in hs, sorted by start. With
// one slot, each holder's token must be above the one's that started before
// it. With several, children of grants in a row may start in another order,
// so what the records show is weaker but as certain: a run's grant comes
// after the run asked, and its child's start after the grant, so a child
// whose run asked after another child had started was granted after it and
// must hold a higher token; and no two grants share a token.
func fencing(hs []holder, slots int) []string {
	var out []string
	if slots <= 1 {
		for i := 1; i < len(hs); i++ {
			if h, prev := hs[i], hs[i-1]; h.token <= prev.token {
				out = append(out, fmt.Sprintf("token did not rise: %s (token %d) started after %s (token %d)",
					h.file, h.token, prev.file, prev.token))
			}
		}
		return out
	}
	seen := map[int64]string{}
	for _, h := range hs {
		if other, ok := seen[h.token]; ok {
			out = append(out, fmt.Sprintf("token given twice: %s and %s both hold token %d", other, h.file, h.token))
		}
		seen[h.token] = h.file
	}
	for _, h := range hs {
		for _, e := range hs {
			if e.first < h.asked && e.token >= h.token {
				out = append(out, fmt.Sprintf("token did not rise: %s (token %d) asked %.1f ms after %s (token %d) had started",
					h.file, h.token, float64(h.asked-e.first)/1e6, e.file, e.token))
			}
		}
	}
	return out
}

// crowding returns every holder in hs, sorted by start, that started while
// slots earlier ones were still alive.
func crowding(hs []holder, slots int) []string {
	var out []string
	var alive []holder // earlier holders last seen alive at or after the current one's start
	for _, h := range hs {
		alive = slices.DeleteFunc(alive, func(e holder) bool { return e.last < h.first })
		if len(alive) >= slots {
			// The one of them seen alive the longest, as with one slot.
			e := slices.MaxFunc(alive, func(a, b holder) int { return int64Cmp(a.last, b.last) })
			out = append(out, fmt.Sprintf("%d children alive at once (at most %d): %s (token %d) started %.1f ms before %s (token %d) was last seen alive",
				len(alive)+1, slots, h.file, h.token, float64(e.last-h.first)/1e6, e.file, e.token))
		}
		alive = append(alive, h)
	}
	return out
}

func int64Cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

func TestViolationsFindsOverlapsAndFallingTokens(t *testing.T) {
	h := func(token, first, last int64) holder {
		return holder{file: strconv.FormatInt(token, 10), token: token, first: first, last: last}
	}
	// asked is h whose run was asked for at asked.
	asked := func(token, asked, first, last int64) holder {
		x := h(token, first, last)
		x.asked = asked
		return x
	}
	tests := []struct {
		name    string
		hs      []holder
		slots   int
		limited bool
		want    int
	}{
		{"one after the other", []holder{h(1, 0, 10), h(2, 11, 20), h(3, 21, 30)}, 1, true, 0},
		{"given out of order", []holder{h(3, 21, 30), h(1, 0, 10), h(2, 11, 20)}, 1, true, 0},
		{"start at the last record", []holder{h(1, 0, 10), h(2, 10, 20)}, 1, true, 1},
		{"inside a long-lived earlier one", []holder{h(1, 0, 100), h(2, 11, 20), h(3, 21, 30)}, 1, true, 2},
		{"token fell", []holder{h(2, 0, 10), h(1, 11, 20)}, 1, true, 1},
		{"token repeated", []holder{h(2, 0, 10), h(2, 11, 20)}, 1, true, 1},
		{"overlap ignored without exclusion", []holder{h(1, 0, 100), h(2, 11, 20)}, 1, false, 0},
		{"token fell, without exclusion", []holder{h(2, 0, 100), h(1, 11, 20)}, 1, false, 1},

		{"three slots, three at once", []holder{h(1, 0, 100), h(2, 5, 100), h(3, 10, 100), h(4, 101, 200)}, 3, true, 0},
		{"three slots, a fourth at once", []holder{h(1, 0, 100), h(2, 5, 100), h(3, 10, 100), h(4, 100, 200)}, 3, true, 1},
		{"three slots, four at once after a gap", []holder{h(1, 0, 300), h(2, 5, 20), h(3, 10, 300), h(4, 21, 300), h(5, 30, 40)}, 3, true, 1},
		{"three slots, children start out of grant order", []holder{asked(2, 0, 5, 50), asked(1, 0, 9, 50)}, 3, true, 0},
		{"three slots, asked after a higher token started", []holder{asked(5, 0, 5, 50), asked(4, 6, 9, 50)}, 3, true, 1},
		{"three slots, asked at an unknown time", []holder{h(5, 5, 50), h(4, 9, 50)}, 3, true, 0},
		{"three slots, token given twice", []holder{h(5, 5, 50), h(5, 60, 70)}, 3, true, 1},
		{"three slots, a fourth ignored without a limit", []holder{h(1, 0, 100), h(2, 5, 100), h(3, 10, 100), h(4, 100, 200)}, 3, false, 0},
	}
	for _, tt := range tests {
		if got := violations(tt.hs, tt.slots, tt.limited); len(got) != tt.want {
			t.Errorf("%s: %d violations %q, want %d", tt.name, len(got), got, tt.want)
		}
	}
}

func TestReadHolder(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	got, err := readHolder(write("a.rec", "7 start 100\n7 alive 150\n7 alive 19"))
	if err != nil || got == nil || *got != (holder{file: "a.rec", token: 7, first: 100, last: 150}) {
		t.Errorf("killed child with a torn line: %+v, %v", got, err)
	}
	got, err = readHolder(write("b.rec", "8 start 100\n8 alive 150\n8 end 160\n"))
	if err != nil || got == nil || !got.ended || got.last != 160 {
		t.Errorf("child that ended: %+v, %v", got, err)
	}
	got, err = readHolder(write("asked.rec", "9 start 100 40\n9 end 160\n"))
	if err != nil || got == nil || got.asked != 40 || got.first != 100 {
		t.Errorf("start record saying when its run was asked for: %+v, %v", got, err)
	}
	if got, err := readHolder(write("c.rec", "")); err != nil || got != nil {
		t.Errorf("empty file: %+v, %v; want nothing", got, err)
	}
	for name, content := range map[string]string{
		"no start":       "9 alive 100\n",
		"other token":    "9 start 100\n10 alive 150\n",
		"time went back": "9 start 100\n9 alive 90\n",
		"after the end":  "9 start 100\n9 end 110\n9 alive 120\n",
		"garbage":        "9 start\n",
		"asked on alive": "9 start 100\n9 alive 110 40\n",
	} {
		if _, err := readHolder(write("bad.rec", content)); err == nil {
			t.Errorf("%s: accepted %q", name, content)
		}
	}
}

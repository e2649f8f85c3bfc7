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
	first int64 // CLOCK_MONOTONIC ns of its start record
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
		f := strings.Fields(sc.Text())
		if len(f) != 3 {
			return nil, fmt.Errorf("%s:%d: malformed record %q", name, n, sc.Text())
		}
		token, err1 := strconv.ParseInt(f[0], 10, 64)
		at, err2 := strconv.ParseInt(f[2], 10, 64)
		if err1 != nil || err2 != nil {
			return nil, fmt.Errorf("%s:%d: malformed record %q", name, n, sc.Text())
		}
		switch {
		case h == nil && f[1] != recStart:
			return nil, fmt.Errorf("%s:%d: first record is %q, not %q", name, n, f[1], recStart)
		case h == nil:
			h = &holder{file: filepath.Base(name), token: token, first: at}
		case token != h.token || at < h.last || h.ended:
			return nil, fmt.Errorf("%s:%d: record %q does not follow the child's earlier ones", name, n, sc.Text())
		}
		h.last = at
		h.ended = f[1] == recEnd
	}
	return h, nil
}

// violations returns every breach of the contract in hs. Ordered by start:
// a holder that started while an earlier one was still alive breaks mutual
// exclusion (checked only when exclusive); a token not above the previous
// holder's breaks fencing.
func violations(hs []holder, exclusive bool) []string {
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(a, b holder) int { return int64Cmp(a.first, b.first) })
	var out []string
	latest := -1 // index of the earlier holder alive the longest
	for i, h := range hs {
		if i > 0 && h.token <= hs[i-1].token {
			out = append(out, fmt.Sprintf("token did not rise: %s (token %d) started after %s (token %d)",
				h.file, h.token, hs[i-1].file, hs[i-1].token))
		}
		if exclusive && latest >= 0 && h.first <= hs[latest].last {
			out = append(out, fmt.Sprintf("two children alive at once: %s (token %d) started %.1f ms before %s (token %d) was last seen alive",
				h.file, h.token, float64(hs[latest].last-h.first)/1e6, hs[latest].file, hs[latest].token))
		}
		if latest < 0 || h.last > hs[latest].last {
			latest = i
		}
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
	tests := []struct {
		name      string
		hs        []holder
		exclusive bool
		want      int
	}{
		{"one after the other", []holder{h(1, 0, 10), h(2, 11, 20), h(3, 21, 30)}, true, 0},
		{"given out of order", []holder{h(3, 21, 30), h(1, 0, 10), h(2, 11, 20)}, true, 0},
		{"start at the last record", []holder{h(1, 0, 10), h(2, 10, 20)}, true, 1},
		{"inside a long-lived earlier one", []holder{h(1, 0, 100), h(2, 11, 20), h(3, 21, 30)}, true, 2},
		{"token fell", []holder{h(2, 0, 10), h(1, 11, 20)}, true, 1},
		{"token repeated", []holder{h(2, 0, 10), h(2, 11, 20)}, true, 1},
		{"overlap ignored without exclusion", []holder{h(1, 0, 100), h(2, 11, 20)}, false, 0},
		{"token fell, without exclusion", []holder{h(2, 0, 100), h(1, 11, 20)}, false, 1},
	}
	for _, tt := range tests {
		if got := violations(tt.hs, tt.exclusive); len(got) != tt.want {
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
	if got, err := readHolder(write("c.rec", "")); err != nil || got != nil {
		t.Errorf("empty file: %+v, %v; want nothing", got, err)
	}
	for name, content := range map[string]string{
		"no start":       "9 alive 100\n",
		"other token":    "9 start 100\n10 alive 150\n",
		"time went back": "9 start 100\n9 alive 90\n",
		"after the end":  "9 start 100\n9 end 110\n9 alive 120\n",
		"garbage":        "9 start\n",
	} {
		if _, err := readHolder(write("bad.rec", content)); err == nil {
			t.Errorf("%s: accepted %q", name, content)
		}
	}
}

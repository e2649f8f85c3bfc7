package initbudget

import (
	"bufio"
	"bytes"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLinkerPrunesUnusedMethods fails when leasectl links a call to
// reflect's MethodByName with a computed name, such as text/template's
// field lookup. The linker then keeps every exported method of every type
// that reaches an interface, used or not: with go-redis's command methods
// the binary grew from 13.5 to 21.7 MB, and every leasectl process and
// watchdog maps and faults in the difference. One cobra call brings it in
// (SetUsageTemplate, SetHelpTemplate, SetVersionTemplate); cobra's own
// defaults do not.
func TestLinkerPrunesUnusedMethods(t *testing.T) {
	if testing.Short() {
		t.Skip("builds leasectl with the linker's dependency dump")
	}
	cmd := exec.Command("go", "build", "-ldflags=-dumpdep", "-o", os.DevNull, ".")
	cmd.Dir = filepath.Join("..", "..") // the module root, from this package's folder
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("go build -ldflags=-dumpdep: %v\n%s", err, tail(out))
	}
	// The linker marks the functions that make it keep every method
	// "<ReflectMethod>"; a dependency dump without any means full pruning.
	culprits := map[string]bool{}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(nil, 1<<20)
	for sc.Scan() {
		if from, _, ok := strings.Cut(sc.Text(), " <ReflectMethod> ->"); ok {
			culprits[from] = true
		}
	}
	if len(culprits) > 0 {
		t.Errorf("leasectl links reflect method lookups by computed name, which keep every exported method of every type in the binary: %s", strings.Join(slices.Sorted(maps.Keys(culprits)), ", "))
	}
	if sc.Err() != nil {
		t.Fatal(sc.Err())
	}
}

// tail is the end of a long output, for a failure message.
func tail(b []byte) []byte {
	const keep = 2000
	if len(b) > keep {
		return b[len(b)-keep:]
	}
	return b
}

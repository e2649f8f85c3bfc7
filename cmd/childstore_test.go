package cmd

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/redistest"
	"github.com/leasectl/leasectl/internal/testenv"
)

// fencingChild fences its commit as the README shows, without naming the
// store: it must reach the one its run was given.
var fencingChild = []string{"--", "sh", "-c", `leasectl token check --job "$LEASECTL_JOB_ID" --token "$LEASECTL_FENCING_TOKEN"`}

// TestChildReachesTheStoreOfItsRun runs a real child that calls leasectl
// token check, with the store and namespace given to the run by flag, by
// environment, or not at all: the check asks the store that granted the
// token, so it says the token is current (exit 0).
func TestChildReachesTheStoreOfItsRun(t *testing.T) {
	const password = "child-Pa55"
	srv, err := redistest.Start(redistest.Options{Args: []string{"--requirepass", password}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = srv.Stop() })
	redisURL := "redis://:" + password + "@" + srv.Addr + "/0"
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	// userEnv with leasectl on the PATH, as the child finds it.
	env := func(t *testing.T, extra ...string) []string {
		e := userEnv(t)
		for i, v := range e {
			if strings.HasPrefix(v, "PATH=") {
				e[i] = "PATH=" + filepath.Dir(bin) + string(os.PathListSeparator) + strings.TrimPrefix(v, "PATH=")
			}
		}
		return append(e, extra...)
	}
	tests := []struct {
		name string
		env  []string
		args []string
	}{
		{"Redis with a password and a namespace, by flag", nil,
			[]string{"--store", redisURL, "--namespace", "team-a"}},
		{"Redis by environment", []string{"LEASECTL_STORE=" + redisURL, "LEASECTL_NAMESPACE=team-b"}, nil},
		{"a flag over a stale environment", []string{"LEASECTL_STORE=redis://127.0.0.1:1/0", "LEASECTL_NAMESPACE=elsewhere"},
			[]string{"--store", redisURL, "--namespace", "team-c"}},
		{"an embedded store in a folder of its own, by flag", nil,
			[]string{"--store", "file://" + t.TempDir(), "--namespace", "team-d"}},
		{"the default store over a stale environment", []string{"LEASECTL_STORE=redis://127.0.0.1:1/0"},
			[]string{"--store", "", "--namespace", "team-e"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := append(append(slices.Clone(tt.args), "run", "--job", "fenced"), fencingChild...)
			res := leasectlBinary(t, env(t, tt.env...), args...)
			if res.code != 0 {
				t.Errorf("exit %d, want 0 (the child's token is current); stderr %q", res.code, res.stderr)
			}
		})
	}
}

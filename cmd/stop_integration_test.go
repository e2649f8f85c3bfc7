package cmd

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/testenv"
	"github.com/leasectl/leasectl/leasestore"
)

// TestStopStopsARunningChild runs a child under the real binary, stops it
// with `leasectl stop` from "another host" (another process on the same
// store), and checks what the run, the history and the next stop say.
func TestStopStopsARunningChild(t *testing.T) {
	bin, err := testenv.Leasectl()
	if err != nil {
		t.Fatal(err)
	}
	for name, newStore := range realStores(t) {
		t.Run(name, func(t *testing.T) {
			rs := newStore(t)
			if _, errOut, code := rs.leasectl(t, "stop", "encode", "--reason", "nothing runs"); code != exitFailure || !strings.Contains(errOut, "not running") {
				t.Errorf("stop of an idle job: exit %d, %q; want %d saying it is not running", code, errOut, exitFailure)
			}
			run := testenv.Start(t, exec.Command(bin, "--store", rs.url, "--namespace", rs.namespace,
				"run", "--job", "encode", "--ttl", "3s", "--grace", "1s", "--",
				"sh", "-c", `trap 'echo term; exit 3' TERM; echo started; while :; do sleep 0.05; done`))
			run.Expect("started")
			out, errOut, code := rs.leasectl(t, "stop", "encode", "--reason", "bad deploy (INC-1)", "--json")
			if code != 0 || !strings.Contains(out, `"action": "stop-requested"`) {
				t.Fatalf("stop: exit %d, %q, %s", code, out, errOut)
			}
			run.Expect("term") // SIGTERM reached the child at the holder's next renewal
			if code := run.ExitCode(); code != exitStopped {
				t.Errorf("the stopped run exited %d, want %d", code, exitStopped)
			}
			st, err := rs.open(t).Status(context.Background(), "encode")
			if err != nil {
				t.Fatal(err)
			}
			if st.Crashes != 0 || st.LastOutcome == nil || st.LastOutcome.Result != leasestore.ResultFailed ||
				!strings.HasPrefix(st.LastOutcome.Reason, "stopped by ") || !strings.HasSuffix(st.LastOutcome.Reason, ": bad deploy (INC-1)") {
				t.Errorf("after the stop: crashes %d, last outcome %+v; want a failed run stopped by the operator, no crash", st.Crashes, st.LastOutcome)
			}
			var kinds []leasestore.EventKind
			for _, e := range st.History {
				kinds = append(kinds, e.Kind)
			}
			if want := []leasestore.EventKind{leasestore.EventAcquired, leasestore.EventStop, leasestore.EventReleased}; !slices.Equal(kinds, want) {
				t.Errorf("history %v, want %v", kinds, want)
			}
		})
	}
}

package cmd

import (
	"context"
	"testing"
)

func TestNewCmdLs(t *testing.T) {
	for _, tc := range []struct {
		argv     []string
		wantCode int
		wantJSON bool
	}{
		{argv: nil},
		{argv: []string{"--json"}, wantJSON: true},
		{argv: []string{"extra"}, wantCode: exitUsage},
	} {
		var got *LsOptions
		code := executeArgs(NewCmdLs(testFactory(), func(o *LsOptions) error { got = o; return nil }), tc.argv...)
		if code != tc.wantCode {
			t.Errorf("ls %q: exit %d, want %d", tc.argv, code, tc.wantCode)
			continue
		}
		if code == 0 && got.JSON != tc.wantJSON {
			t.Errorf("ls %q: JSON %v, want %v", tc.argv, got.JSON, tc.wantJSON)
		}
	}
}

func TestLsOutput(t *testing.T) {
	for _, m := range outputModes {
		for _, tc := range []struct {
			name  string
			store *stubStore
		}{
			{"ls", sampleStore()},
			{"ls_empty", &stubStore{}},
		} {
			ios, out, errOut := testStreams(m.tty)
			if err := lsRun(context.Background(), &LsOptions{IO: ios, Now: fixedNow, OpenStore: opener(tc.store), JSON: m.json}); err != nil {
				t.Fatalf("%s (%s): %v", tc.name, m.name, err)
			}
			assertGolden(t, tc.name+"_"+m.name, out.String(), errOut.String())
		}
	}
}

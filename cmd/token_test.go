package cmd

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/fence"
	"github.com/leasectl/leasectl/leasestore"
)

func TestNewCmdTokenCheck(t *testing.T) {
	for _, tc := range []struct {
		argv     []string
		wantCode int
		want     TokenCheckOptions
	}{
		{argv: []string{"--job", "nightly-report", "--token", "1772331247000001"}, want: TokenCheckOptions{Job: "nightly-report", Token: 1772331247000001}},
		{argv: []string{"--job", "j", "--token", "7", "--json"}, want: TokenCheckOptions{Job: "j", Token: 7, JSON: true}},
		{argv: []string{"--job", "j"}, wantCode: exitUsage},
		{argv: []string{"--token", "7"}, wantCode: exitUsage},
		{argv: []string{"--job", "j", "--token", "0"}, wantCode: exitUsage},
		{argv: []string{"--job", "j", "--token", "-3"}, wantCode: exitUsage},
		{argv: []string{"--job", "j", "--token", "seven"}, wantCode: exitUsage},
		{argv: []string{"--job", "j*", "--token", "7"}, wantCode: exitUsage},
		{argv: []string{"--job", "j", "--token", "7", "extra"}, wantCode: exitUsage},
	} {
		var got *TokenCheckOptions
		code := executeArgs(NewCmdTokenCheck(testFactory(), func(o *TokenCheckOptions) error { got = o; return nil }), tc.argv...)
		if code != tc.wantCode {
			t.Errorf("token check %q: exit %d, want %d", tc.argv, code, tc.wantCode)
			continue
		}
		if code == 0 && (got.Job != tc.want.Job || got.Token != tc.want.Token || got.JSON != tc.want.JSON) {
			t.Errorf("token check %q: options %+v, want %+v", tc.argv, got, tc.want)
		}
	}
}

func TestTokenGroupRefusesUnknownSubcommand(t *testing.T) {
	if code := executeArgs(NewCmdToken(testFactory()), "chekc"); code != exitUsage {
		t.Fatalf("token chekc: exit %d, want %d", code, exitUsage)
	}
	if code := executeArgs(NewCmdToken(testFactory())); code != exitOK {
		t.Fatalf("token alone: exit %d, want 0 (prints help)", code)
	}
}

func TestTokenCheckOutput(t *testing.T) {
	for _, m := range outputModes {
		for _, tc := range []struct {
			name     string
			token    int64
			wantCode int
		}{
			{"token_current", 1772331247000001, exitOK},
			{"token_stale", 1772240000000001, exitFailure},
		} {
			ios, out, errOut := testStreams(m.tty)
			err := tokenCheckRun(context.Background(), &TokenCheckOptions{IO: ios, Now: fixedNow, OpenStore: opener(sampleStore()), Job: "nightly-report", Token: tc.token, JSON: m.json})
			code := reportError(errOut, err)
			if code != tc.wantCode {
				t.Errorf("%s (%s): exit %d, want %d", tc.name, m.name, code, tc.wantCode)
			}
			if tc.wantCode == exitFailure && strings.Count(errOut.String(), "\n") != 1 {
				t.Errorf("%s (%s): stderr %q, want the reason in one line", tc.name, m.name, errOut.String())
			}
			assertGolden(t, tc.name+"_"+m.name, out.String(), errOut.String())
		}
	}
}

func TestTokenCheckQuietWhenPiped(t *testing.T) {
	ios, out, errOut := testStreams(false)
	err := tokenCheckRun(context.Background(), &TokenCheckOptions{IO: ios, Now: fixedNow, OpenStore: opener(sampleStore()), Job: "nightly-report", Token: 1772331247000001})
	var msg bytes.Buffer
	if code := reportError(&msg, err); code != exitOK || out.Len()+errOut.Len()+msg.Len() != 0 {
		t.Fatalf("exit %d, output %q %q %q; want 0 and silence for a script", code, out, errOut, msg.String())
	}
}

// TestTokenAboveEveryGrantInOneWording: `token check` and the fence
// package's middleware word a token above every grant the same way.
func TestTokenAboveEveryGrantInOneWording(t *testing.T) {
	check := (&leasestore.StaleTokenError{Job: "j", Token: 9, Current: 5, Live: true}).Error()
	middleware := (&fence.StaleError{Job: "j", Token: 9, Newest: 5, Live: true}).Error()
	for _, msg := range []string{check, middleware} {
		if !strings.Contains(msg, "was never granted") || strings.Contains(msg, "stale") {
			t.Errorf("%q: want it called never granted, not stale", msg)
		}
	}
}

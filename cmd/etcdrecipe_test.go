package cmd

import (
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/leasectl/leasectl/internal/etcdtest"
)

// etcdRecipe returns the etcd least-privilege recipe of file, the shell
// block between <!-- etcd-auth --> markers, without its indentation.
func etcdRecipe(t *testing.T, file string) string {
	t.Helper()
	block := between(t, file, "<!-- etcd-auth -->\n", "<!-- /etcd-auth -->")
	var sh []string
	for _, l := range strings.Split(block, "\n") {
		if l = strings.TrimSpace(l); !strings.HasPrefix(l, "```") {
			sh = append(sh, l)
		}
	}
	return strings.Join(sh, "\n")
}

// TestEtcdLeastPrivilegeRecipe runs the README's etcd recipe as written
// against an etcd this test starts, then leasectl as a host would: with
// the recipe's user every command works; without credentials, or in
// another namespace than the role's, it is refused with exit 69.
func TestEtcdLeastPrivilegeRecipe(t *testing.T) {
	recipe := etcdRecipe(t, "../README.md")
	if other := etcdRecipe(t, "../docs/etcd.md"); other != recipe {
		t.Fatalf("docs/etcd.md's recipe differs from the README's:\n%s\n---\n%s", other, recipe)
	}
	c, err := etcdtest.Start(etcdtest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	const rootPW, leasectlPW = "r00t-Pa55-recipe", "lease-Pa55-recipe"

	ctx, cancel := context.WithTimeout(context.Background(), binaryHangGuard)
	defer cancel()
	sh := exec.CommandContext(ctx, "sh", "-e", "-c", recipe)
	sh.Env = append(cleanEnv(), "ETCDCTL_API=3", "ETCDCTL_ENDPOINTS="+c.Members[0].ClientURL,
		"ETCD_ROOT_PASSWORD="+rootPW, "LEASECTL_ETCD_PASSWORD="+leasectlPW)
	if out, err := sh.CombinedOutput(); err != nil {
		t.Fatalf("the recipe failed: %v\n%s", err, out)
	}

	env := append(userEnv(t), "LEASECTL_STORE="+c.URL(), "LEASECTL_LOG_FORMAT=console")
	withUser := append(slices.Clip(env), "LEASECTL_ETCD_USER=leasectl", "LEASECTL_ETCD_PASSWORD="+leasectlPW)
	for _, args := range [][]string{
		{"run", "--job", "nightly-report", "--", "true"},
		{"status", "nightly-report"},
		{"ls"},
		{"scan"},
		{"quarantine", "list"},
	} {
		if res := leasectlBinary(t, withUser, args...); res.code != 0 {
			t.Errorf("%q as the recipe's user: exit %d, stderr %q", args, res.code, res.stderr)
		}
	}
	for name, tc := range map[string]struct {
		env  []string
		args []string
		says string
	}{
		"no credentials":      {env, []string{"run", "--job", "nightly-report", "--", "true"}, "user and password"},
		"another namespace":   {withUser, []string{"--namespace", "other", "run", "--job", "nightly-report", "--", "true"}, "denies"},
		"the root's password": {append(slices.Clip(env), "LEASECTL_ETCD_USER=leasectl", "LEASECTL_ETCD_PASSWORD="+rootPW), []string{"ls"}, "credentials"},
	} {
		res := leasectlBinary(t, tc.env, tc.args...)
		if res.code != exitUnavailable || !strings.Contains(res.stderr, tc.says) || strings.Contains(res.stderr, "Pa55") {
			t.Errorf("%s: exit %d, stderr %q; want 69 saying %q, no password", name, res.code, res.stderr, tc.says)
		}
	}
}

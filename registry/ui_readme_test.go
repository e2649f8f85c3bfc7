package registry

import (
	"context"
	"net/http"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// readmeOnCallPage is the README's section on the on-call page: its role
// table (role -> may) and its prose.
func readmeOnCallPage(t *testing.T) (map[string]string, string) {
	t.Helper()
	readme, err := os.ReadFile("../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, rest, ok := strings.Cut(string(readme), "<!-- oncall-page -->")
	table, prose, ok2 := strings.Cut(rest, "<!-- /oncall-page -->")
	prose, _, _ = strings.Cut(prose, "\n## ")
	if !ok || !ok2 {
		t.Fatal("README.md has no <!-- oncall-page --> table")
	}
	roles := map[string]string{}
	for _, line := range strings.Split(table, "\n") {
		cells := strings.Split(line, "|")
		if len(cells) == 5 && strings.HasPrefix(strings.TrimSpace(cells[1]), "`") {
			roles[strings.Trim(strings.TrimSpace(cells[1]), "`")] = cells[3]
		}
	}
	return roles, prose
}

// TestReadmeOnCallPage holds the README's on-call page section to the
// page: each role's row says whether it may act, and the figures its
// prose gives are the code's.
func TestReadmeOnCallPage(t *testing.T) {
	roles, prose := readmeOnCallPage(t)
	tokens := map[string]string{"reader": readerToken, "worker": workerToken, "operator": operatorToken}
	if len(roles) != len(tokens) {
		t.Fatalf("the README's table has roles %v, want reader, worker and operator", roles)
	}
	for role, may := range roles {
		store := newUIStore(t)
		srv := newTestServer(t, store, nil)
		b := newBrowser(t, srv.url)
		b.login(tokens[role], "ada-"+role)
		startRun(t, store, "j")
		for _, action := range []struct {
			says, path string
			kind       leasestore.EventKind
		}{
			{"quarantine a job and release it", "/actions/quarantine", leasestore.EventQuarantined},
			{"stop a job's run", "/actions/stop", leasestore.EventStop},
		} {
			acts := strings.Contains(may, action.says)
			page := b.do("GET", "/jobs/j", nil)
			if shown := strings.Contains(string(page.body), `action="`+action.path+`"`); shown != acts {
				t.Errorf("%s: the README says it may %s: %v; the running job's page shows its form: %v", role, action.says, acts, shown)
			}
			a := b.do("POST", action.path, url.Values{"job": {"j"}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {b.csrf}})
			if acts != (a.status == http.StatusSeeOther) {
				t.Errorf("%s: the README says it may %s: %v; posting %s answered %d", role, action.says, acts, action.path, a.status)
			}
			if !acts {
				continue
			}
			st, err := store.Status(context.Background(), "j")
			if err != nil {
				t.Fatal(err)
			}
			last := st.History[len(st.History)-1]
			if last.Kind != action.kind || last.Worker != "ada-"+role {
				t.Errorf("%s: the history's last event is %+v, want %s under the operator's name", role, last, action.kind)
			}
		}
	}
	js, err := uiFiles.ReadFile("ui/static/app.js")
	if err != nil {
		t.Fatal(err)
	}
	for claim, holds := range map[string]bool{
		"the first 10,000 by ID":            api.MaxJobsListed == 10000 && newUI(time.Hour, time.Now).maxJobs == api.MaxJobsListed,
		"within 5 s":                        uiReconcileInterval.String() == "5s",
		"nothing for 25 s":                  strings.Contains(string(js), "Date.now() - lastHeard > 25000"),
		"A login lasts 12 hours":            DefaultSessionTTL.String() == "12h0m0s",
		"HttpOnly, Secure, SameSite=Strict": true, // TestUILoginSetsAStrictSessionCookie
	} {
		if !strings.Contains(strings.Join(strings.Fields(prose), " "), claim) {
			t.Errorf("the README's on-call page section no longer says %q; update this test", claim)
		}
		if !holds {
			t.Errorf("the README says %q, which the code no longer does", claim)
		}
	}
}

package registry

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/leasectl/leasectl/clock/fakeclock"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/filestore"
	"github.com/leasectl/leasectl/registry/api"
)

// browser is a test's web browser on the on-call page: cookies kept,
// redirects not followed.
type browser struct {
	t    *testing.T
	base string
	c    *http.Client
	csrf string
}

func newBrowser(t *testing.T, base string) *browser {
	jar, err := cookiejar.New(nil)
	if err != nil {
		t.Fatal(err)
	}
	return &browser{t: t, base: base, c: &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}}
}

var csrfField = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

// do sends a request and returns its answer; a page's CSRF token is kept.
func (b *browser) do(method, path string, form url.Values) answer {
	b.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, b.base+path, body)
	if err != nil {
		b.t.Fatal(err)
	}
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	resp, err := b.c.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		b.t.Fatal(err)
	}
	if m := csrfField.FindSubmatch(data); m != nil {
		b.csrf = string(m[1])
	}
	return answer{status: resp.StatusCode, header: resp.Header, body: data}
}

// login logs in with token as name and reads the jobs page, for its CSRF
// token.
func (b *browser) login(token, name string) {
	b.t.Helper()
	if a := b.do("POST", "/login", url.Values{"token": {token}, "name": {name}}); a.status != http.StatusSeeOther || a.header.Get("Location") != "/" {
		b.t.Fatalf("login: %d %s", a.status, a.body)
	}
	if a := b.do("GET", "/", nil); a.status != http.StatusOK {
		b.t.Fatalf("jobs page after login: %d %s", a.status, a.body)
	}
}

// quarantined reports whether job is quarantined, and by whom.
func quarantinedBy(t *testing.T, store leasestore.Driver, job string) (bool, string) {
	t.Helper()
	st, err := store.Status(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if st.Quarantine == nil {
		return false, ""
	}
	return true, st.Quarantine.By
}

// stoppedBy reports whether a stop of job's run is pending, and by whom.
func stoppedBy(t *testing.T, store leasestore.Driver, job string) (bool, string) {
	t.Helper()
	st, err := store.Status(context.Background(), job)
	if err != nil {
		t.Fatal(err)
	}
	if st.Holder == nil || st.Holder.Stop == nil {
		return false, ""
	}
	return true, st.Holder.Stop.By
}

// startRun grants job to worker w on store, as a run outside the registry.
func startRun(t *testing.T, store leasestore.Driver, job string) *leasestore.Lease {
	t.Helper()
	l, err := store.Acquire(context.Background(), leasestore.AcquireRequest{Job: job, Holder: "w", Host: "h", PID: 1, TTL: time.Minute, EvidenceTTL: time.Hour, MaxCrashes: 3})
	if err != nil {
		t.Fatal(err)
	}
	return l
}

func newUIStore(t *testing.T) leasestore.Driver {
	t.Helper()
	store, err := filestore.Open(t.TempDir(), testNamespace)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	return store
}

func TestUILoginSetsAStrictSessionCookie(t *testing.T) {
	srv := newTestServer(t, newUIStore(t), nil)
	b := newBrowser(t, srv.url)
	if a := b.do("GET", "/", nil); a.status != http.StatusSeeOther || a.header.Get("Location") != "/login" {
		t.Fatalf("jobs page without a session: %d, Location %q; want 303 to /login", a.status, a.header.Get("Location"))
	}
	if a := b.do("POST", "/login", url.Values{"token": {"not-a-token-of-the-registry"}, "name": {"mallory"}}); a.status != http.StatusUnauthorized || len(a.header.Values("Set-Cookie")) != 0 {
		t.Fatalf("login with a wrong token: %d, cookies %q", a.status, a.header.Values("Set-Cookie"))
	}
	a := b.do("POST", "/login", url.Values{"token": {readerToken}, "name": {"ada"}})
	cookies := (&http.Response{Header: a.header}).Cookies()
	if a.status != http.StatusSeeOther || len(cookies) != 1 {
		t.Fatalf("login: %d, cookies %q", a.status, a.header.Values("Set-Cookie"))
	}
	c := cookies[0]
	if !c.HttpOnly || !c.Secure || c.SameSite != http.SameSiteStrictMode || c.MaxAge != int(DefaultSessionTTL/time.Second) || c.Path != "/" {
		t.Errorf("session cookie %q: want HttpOnly, Secure, SameSite=Strict, Max-Age %d, Path /", a.header.Get("Set-Cookie"), int(DefaultSessionTTL/time.Second))
	}
	if strings.Contains(string(a.body), readerToken) || strings.Contains(srv.log.String(), readerToken) {
		t.Error("the token is echoed in the answer or the log")
	}
	page := b.do("GET", "/", nil)
	if page.status != http.StatusOK || !strings.Contains(string(page.body), "ada (reader)") {
		t.Fatalf("jobs page after login: %d %s", page.status, page.body)
	}
	if a := b.do("POST", "/logout", url.Values{"csrf": {b.csrf}}); a.status != http.StatusSeeOther || a.header.Get("Location") != "/login" {
		t.Fatalf("logout: %d %s", a.status, a.body)
	}
	if a := b.do("GET", "/", nil); a.status != http.StatusSeeOther {
		t.Errorf("jobs page after logout: %d, want 303 to /login", a.status)
	}
}

func TestUIPagesHaveAStrictPolicyAndNoInlineCode(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	b := newBrowser(t, srv.url)
	b.login(operatorToken, "ada")
	if err := store.Quarantine(context.Background(), "poison", leasestore.Note{By: "ada", Reason: "loops"}); err != nil {
		t.Fatal(err)
	}
	srv.changed("poison")
	inline := regexp.MustCompile(`<script>|<script [^>]*>[^<]|\sstyle=|\son[a-z]+=`)
	for _, path := range []string{"/", "/jobs/poison", "/quarantine", "/login", "/jobs/no%20such"} {
		a := b.do("GET", path, nil)
		if got := a.header.Get("Content-Security-Policy"); got != contentSecurityPolicy || !strings.Contains(got, "script-src 'self'") {
			t.Errorf("%s: Content-Security-Policy %q", path, got)
		}
		if a.header.Get("X-Content-Type-Options") != "nosniff" || a.header.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", path, a.header)
		}
		if m := inline.Find(a.body); m != nil {
			t.Errorf("%s: inline code %q", path, m)
		}
	}
	for _, asset := range []string{"/static/app.js", "/static/app.css"} {
		if a := b.do("GET", asset, nil); a.status != http.StatusOK || len(a.body) == 0 {
			t.Errorf("%s: %d", asset, a.status)
		}
	}
}

func TestUIActionWithoutCSRFTokenIsRefused(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	b := newBrowser(t, srv.url)
	b.login(operatorToken, "ada")
	startRun(t, store, "j")
	// The session's token with its first character changed: "x" unless it
	// is one already (the masked token is random), which would leave it
	// valid.
	wrong := "x" + b.csrf[1:]
	if b.csrf[0] == 'x' {
		wrong = "y" + b.csrf[1:]
	}
	for _, action := range []struct {
		path string
		done func(*testing.T, leasestore.Driver, string) (bool, string)
	}{{"/actions/quarantine", quarantinedBy}, {"/actions/stop", stoppedBy}} {
		for name, csrf := range map[string][]string{"no token": nil, "a wrong token": {wrong}, "an empty token": {""}} {
			a := b.do("POST", action.path, url.Values{"job": {"j"}, "reason": {"r"}, "confirm": {"yes"}, "csrf": csrf})
			if a.status != http.StatusForbidden {
				t.Errorf("%s with %s: %d, want 403", action.path, name, a.status)
			}
		}
		form := url.Values{"job": {"j"}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {b.csrf}}
		req, _ := http.NewRequest("POST", srv.url+action.path, strings.NewReader(form.Encode()))
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", "https://evil.example")
		if resp, err := b.c.Do(req); err != nil || resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s from another origin: %v %v, want 403", action.path, resp.StatusCode, err)
		}
		if done, _ := action.done(t, store, "j"); done {
			t.Fatalf("a refused %s acted on the job", action.path)
		}
		if a := b.do("POST", action.path, form); a.status != http.StatusSeeOther {
			t.Fatalf("%s with the CSRF token: %d %s", action.path, a.status, a.body)
		}
		if done, by := action.done(t, store, "j"); !done || by != "ada" {
			t.Errorf("%s with the CSRF token: done %v by %q, want true by ada", action.path, done, by)
		}
	}
	if a := b.do("POST", "/logout", url.Values{}); a.status != http.StatusForbidden {
		t.Errorf("logout without the CSRF token: %d, want 403", a.status)
	}
}

func TestUIActionIsConfirmedFirst(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	b := newBrowser(t, srv.url)
	b.login(operatorToken, "ada")
	a := b.do("POST", "/actions/quarantine", url.Values{"job": {"j"}, "reason": {"loops"}, "csrf": {b.csrf}})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `name="confirm" value="yes"`) {
		t.Fatalf("unconfirmed: %d %s", a.status, a.body)
	}
	if a := b.do("POST", "/actions/quarantine", url.Values{"job": {"j"}, "reason": {" "}, "confirm": {"yes"}, "csrf": {b.csrf}}); a.status != http.StatusBadRequest {
		t.Errorf("without a reason: %d, want 400", a.status)
	}
	if q, _ := quarantinedBy(t, store, "j"); q {
		t.Fatal("quarantined without confirmation or reason")
	}
	if a := b.do("POST", "/actions/release", url.Values{"job": {"j"}, "reason": {"fixed"}, "confirm": {"yes"}, "csrf": {b.csrf}}); a.status != http.StatusConflict {
		t.Errorf("releasing a job not quarantined: %d %s", a.status, a.body)
	}
	if a := b.do("POST", "/actions/stop", url.Values{"job": {"j"}, "reason": {"wedged"}, "confirm": {"yes"}, "csrf": {b.csrf}}); a.status != http.StatusConflict ||
		!strings.Contains(string(a.body), "Job j is not running: there is no run to stop.") {
		t.Errorf("stopping a job not running: %d %s", a.status, a.body)
	}
	startRun(t, store, "j")
	a = b.do("POST", "/actions/stop", url.Values{"job": {"j"}, "reason": {"wedged"}, "csrf": {b.csrf}})
	if a.status != http.StatusOK || !strings.Contains(string(a.body), `name="confirm" value="yes"`) || !strings.Contains(string(a.body), "SIGKILL after the run&#39;s --grace") {
		t.Fatalf("stop unconfirmed: %d %s", a.status, a.body)
	}
	if s, _ := stoppedBy(t, store, "j"); s {
		t.Fatal("stopped without confirmation")
	}
}

func TestUIReaderAndWorkerCannotAct(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	startRun(t, store, "poison")
	if err := store.Quarantine(context.Background(), "poison", leasestore.Note{By: "ada", Reason: "loops"}); err != nil {
		t.Fatal(err)
	}
	for _, token := range []string{readerToken, workerToken} {
		b := newBrowser(t, srv.url)
		b.login(token, "bob")
		if a := b.do("GET", "/jobs/poison", nil); strings.Contains(string(a.body), "/actions/") {
			t.Errorf("the job page shows actions to a %s: %s", token, a.body)
		}
		for _, action := range []string{"/actions/quarantine", "/actions/release", "/actions/stop"} {
			a := b.do("POST", action, url.Values{"job": {"poison"}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {b.csrf}})
			if a.status != http.StatusForbidden {
				t.Errorf("%s posting %s: %d, want 403", token, action, a.status)
			}
		}
	}
	if q, _ := quarantinedBy(t, store, "poison"); !q {
		t.Error("a reader or worker released the job")
	}
	if s, _ := stoppedBy(t, store, "poison"); s {
		t.Error("a reader or worker stopped the job's run")
	}
}

func TestUIEscapesJobIDsAndReasons(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	b := newBrowser(t, srv.url)
	b.login(operatorToken, `<b>ada</b>`)
	const job = "team/a:b@c+d=e"
	const reason = `</textarea><script>alert(1)</script><img src=x onerror=alert(2)> "quoted" & 'single'`
	const stopReason = `<script>alert(3)</script><img src=y onerror=alert(4)> wedged`
	startRun(t, store, job)
	if a := b.do("POST", "/actions/stop", url.Values{"job": {job}, "reason": {stopReason}, "confirm": {"yes"}, "csrf": {b.csrf}}); a.status != http.StatusSeeOther {
		t.Fatalf("stop: %d %s", a.status, a.body)
	}
	if a := b.do("POST", "/actions/quarantine", url.Values{"job": {job}, "reason": {reason}, "confirm": {"yes"}, "csrf": {b.csrf}}); a.status != http.StatusSeeOther || a.header.Get("Location") != "/jobs/team/a:b@c+d=e" {
		t.Fatalf("quarantine: %d, Location %q", a.status, a.header.Get("Location"))
	}
	raw := []string{"<script>alert", "<img src=x", "<img src=y", "<b>ada</b>", "</textarea><script>"}
	for _, path := range []string{"/", "/jobs/team/a:b@c+d=e", "/quarantine"} {
		a := b.do("GET", path, nil)
		body := string(a.body)
		if a.status != http.StatusOK || !strings.Contains(body, "&lt;script&gt;alert(1)&lt;/script&gt;") || !strings.Contains(body, ">team/a:b@c+d=e<") {
			t.Errorf("%s: %d, the reason or the job ID is missing or not escaped: %s", path, a.status, body)
		}
		if path != "/quarantine" && !strings.Contains(body, "stopping — by &lt;b&gt;ada&lt;/b&gt;: &lt;script&gt;alert(3)&lt;/script&gt;&lt;img src=y") {
			t.Errorf("%s: the pending stop is missing or not escaped: %s", path, body)
		}
		for _, r := range raw {
			if strings.Contains(body, r) {
				t.Errorf("%s shows %q unescaped", path, r)
			}
		}
	}
	for _, action := range []string{"/actions/release", "/actions/stop"} {
		confirm := b.do("POST", action, url.Values{"job": {job}, "reason": {reason + stopReason}, "csrf": {b.csrf}})
		for _, r := range raw {
			if strings.Contains(string(confirm.body), r) {
				t.Errorf("the confirmation of %s shows %q unescaped", action, r)
			}
		}
	}
	a := b.do("GET", "/jobs/"+url.PathEscape(`<script>x</script>`), nil)
	if a.status != http.StatusBadRequest || strings.Contains(string(a.body), "<script>x") {
		t.Errorf("a job ID with markup: %d %s", a.status, a.body)
	}
	a = b.do("POST", "/actions/quarantine", url.Values{"job": {`"><script>x</script>`}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {b.csrf}})
	if a.status != http.StatusBadRequest || strings.Contains(string(a.body), "<script>x") {
		t.Errorf("an action on a job ID with markup: %d %s", a.status, a.body)
	}
}

func TestUIExpiredSessionIsRefused(t *testing.T) {
	store := newUIStore(t)
	clock := fakeclock.New(time.Date(2026, 11, 27, 2, 0, 0, 0, time.UTC))
	srv := newTestServer(t, store, func(c *Config) { c.Clock = clock; c.SessionTTL = time.Hour })
	b := newBrowser(t, srv.url)
	b.login(operatorToken, "ada")
	clock.Advance(time.Hour)
	if a := b.do("GET", "/", nil); a.status != http.StatusSeeOther || a.header.Get("Location") != "/login" {
		t.Errorf("jobs page with an expired session: %d, want 303 to /login", a.status)
	}
	if a := b.do("POST", "/actions/quarantine", url.Values{"job": {"j"}, "reason": {"r"}, "confirm": {"yes"}, "csrf": {b.csrf}}); a.status != http.StatusUnauthorized {
		t.Errorf("action with an expired session: %d, want 401", a.status)
	}
	if q, _ := quarantinedBy(t, store, "j"); q {
		t.Error("an expired session quarantined the job")
	}
}

func TestUISessionEndsWithItsToken(t *testing.T) {
	srv := newTestServer(t, newUIStore(t), nil)
	b := newBrowser(t, srv.url)
	b.login(operatorToken, "ada")
	tokens, err := ParseTokens(strings.NewReader("reader "+readerToken+"\n"), "test")
	if err != nil {
		t.Fatal(err)
	}
	srv.SetTokens(tokens)
	if a := b.do("GET", "/", nil); a.status != http.StatusSeeOther {
		t.Errorf("jobs page once the session's token is gone: %d, want 303 to /login", a.status)
	}
}

// eventStream is a page's stream of server-sent events, read by a test.
type eventStream struct {
	t      *testing.T
	events *bufio.Scanner
}

// followEvents opens /events with b's session, until the test ends.
func followEvents(t *testing.T, b *browser) *eventStream {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", b.base+"/events", nil)
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return &eventStream{t: t, events: bufio.NewScanner(resp.Body)}
}

// next returns the data of the next event named want.
func (es *eventStream) next(want string) string {
	es.t.Helper()
	var event string
	for es.events.Scan() {
		line := es.events.Text()
		if e, ok := strings.CutPrefix(line, "event: "); ok {
			event = e
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok && event == want {
			return d
		}
	}
	es.t.Fatalf("the stream ended before a %s event: %v", want, es.events.Err())
	return ""
}

// row returns the next job row.
func (es *eventStream) row() jobRow {
	es.t.Helper()
	var row jobRow
	if err := json.Unmarshal([]byte(es.next("job")), &row); err != nil {
		es.t.Fatal(err)
	}
	return row
}

// TestUIEventsFollowRunsThroughTheRegistry reads the page's event stream
// while a run is acquired and released through the registry's API.
func TestUIEventsFollowRunsThroughTheRegistry(t *testing.T) {
	srv := newTestServer(t, newUIStore(t), nil)
	srv.ui.reconcile = time.Hour // only what the registry publishes reaches the page
	b := newBrowser(t, srv.url)
	b.login(readerToken, "ada")
	events := followEvents(t, b)
	events.next("ping")
	var l api.Lease
	request(t, srv.url, "POST", api.PathAcquire, workerToken, acquireBody("nightly/report", "w1", time.Minute)).decode(t, &l)
	if row := events.row(); row.Job != "nightly/report" || row.State != "RUNNING" || row.Holder != "w1 on host-w1, pid 4242" || row.URL != "/jobs/nightly/report" {
		t.Errorf("after acquire: %+v", row)
	}
	if a := request(t, srv.url, "POST", api.PathStop, operatorToken, api.NoteRequest{JobID: "nightly/report", By: "bob@cli", Reason: "wedged"}); a.status != http.StatusOK {
		t.Fatalf("stop: %d %s", a.status, a.body)
	}
	if row := events.row(); row.State != "RUNNING" || row.Stop != "stopping — by bob@cli: wedged" {
		t.Errorf("after a stop through the API: %+v", row)
	}
	a := request(t, srv.url, "POST", api.PathComplete, workerToken, api.CompleteRequest{JobID: "nightly/report", WorkerID: "w1", FencingToken: l.FencingToken, DurationMS: 1500})
	if a.status != http.StatusOK {
		t.Fatalf("complete: %d %s", a.status, a.body)
	}
	if row := events.row(); row.State != "IDLE" || !strings.HasPrefix(row.Last, "completed exit 0 after 1.5s") || row.LastSuccess == "" {
		t.Errorf("after complete: %+v", row)
	}
}

// TestUIEventsFollowRunsElsewhere: a run that reaches the store without
// the registry, and its end, reach the page when the live leases are read
// again.
func TestUIEventsFollowRunsElsewhere(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	srv.ui.reconcile = 20 * time.Millisecond
	b := newBrowser(t, srv.url)
	b.login(readerToken, "ada")
	events := followEvents(t, b)
	events.next("ping")
	l, err := store.Acquire(context.Background(), leasestore.AcquireRequest{Job: "direct", Holder: "w9", Host: "h", PID: 9, TTL: time.Minute, EvidenceTTL: time.Hour, MaxCrashes: 3})
	if err != nil {
		t.Fatal(err)
	}
	if row := events.row(); row.Job != "direct" || row.State != "RUNNING" {
		t.Errorf("after a grant on the store: %+v", row)
	}
	if err := store.Release(context.Background(), l, leasestore.Outcome{Result: leasestore.ResultFailed, ExitCode: 3}); err != nil {
		t.Fatal(err)
	}
	if row := events.row(); row.Job != "direct" || row.State != "IDLE" || !strings.HasPrefix(row.Last, "failed exit 3") {
		t.Errorf("after a release on the store: %+v", row)
	}
	if page := b.do("GET", "/", nil); !strings.Contains(string(page.body), `data-job="direct"`) {
		t.Error("the jobs page does not list a job seen ending elsewhere")
	}
}

// TestUIJobsListsEveryJobTheStoreKnows: jobs at rest, run before the
// registry started and never through it, are listed; past the bound the
// first by ID are, with every live or quarantined job, and the page says
// there are more.
func TestUIJobsListsEveryJobTheStoreKnows(t *testing.T) {
	store := newUIStore(t)
	ctx := context.Background()
	for _, job := range []string{"a/rest", "b/rest", "c/rest"} {
		l, err := store.Acquire(ctx, leasestore.AcquireRequest{Job: job, Holder: "w", Host: "h", PID: 1, TTL: time.Minute, EvidenceTTL: time.Hour, MaxCrashes: 3})
		if err != nil {
			t.Fatal(err)
		}
		if err := store.Release(ctx, l, leasestore.Outcome{Result: leasestore.ResultCompleted}); err != nil {
			t.Fatal(err)
		}
	}
	srv := newTestServer(t, store, nil)
	b := newBrowser(t, srv.url)
	b.login(readerToken, "ada")
	page := string(b.do("GET", "/", nil).body)
	for _, job := range []string{"a/rest", "b/rest", "c/rest"} {
		if !strings.Contains(page, `data-job="`+job+`" data-state="IDLE"`) {
			t.Errorf("the jobs page does not list %s, at rest", job)
		}
	}
	if strings.Contains(page, `id="more"`) {
		t.Error("the jobs page says there are more jobs than it lists")
	}

	srv.ui.maxJobs = 1
	if _, err := store.Acquire(ctx, leasestore.AcquireRequest{Job: "z/live", Holder: "w", Host: "h", PID: 1, TTL: time.Minute, EvidenceTTL: time.Hour, MaxCrashes: 3}); err != nil {
		t.Fatal(err)
	}
	if err := store.Quarantine(ctx, "y/poison", leasestore.Note{By: "ada", Reason: "loops"}); err != nil {
		t.Fatal(err)
	}
	page = string(b.do("GET", "/", nil).body)
	for job, listed := range map[string]bool{"a/rest": true, "b/rest": false, "c/rest": false, "y/poison": true, "z/live": true} {
		if got := strings.Contains(page, `data-job="`+job+`"`); got != listed {
			t.Errorf("listing one job at most, %s listed: %v, want %v", job, got, listed)
		}
	}
	if !strings.Contains(page, `<p id="more">The store knows more than 1 jobs`) {
		t.Error("the jobs page does not say the store knows more jobs than it lists")
	}
}

func TestUIPagesAreCompressedWithAFreshCSRFMask(t *testing.T) {
	srv := newTestServer(t, newUIStore(t), nil)
	b := newBrowser(t, srv.url)
	b.login(readerToken, "ada")
	first := b.csrf
	b.do("GET", "/", nil)
	if b.csrf == first {
		t.Error("two pages carry the same CSRF bytes: a compressed page's size could reveal them")
	}
	if a := b.do("POST", "/logout", url.Values{"csrf": {first}}); a.status != http.StatusSeeOther {
		t.Errorf("logout with an earlier page's CSRF token: %d, want 303", a.status)
	}
	b.login(readerToken, "ada")
	req, _ := http.NewRequest("GET", srv.url+"/", nil)
	req.Header.Set("Accept-Encoding", "gzip")
	resp, err := b.c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.Header.Get("Content-Encoding") != "gzip" || resp.Header.Get("Vary") != "Accept-Encoding" {
		t.Errorf("a page asked for with gzip: Content-Encoding %q, Vary %q", resp.Header.Get("Content-Encoding"), resp.Header.Get("Vary"))
	}
}

// TestUIEventsEndWhenDraining: a draining registry ends the page's stream
// and answers a new one empty, without a ping, so that the page keeps
// saying it lost contact until another registry answers.
func TestUIEventsEndWhenDraining(t *testing.T) {
	srv := newTestServer(t, newUIStore(t), nil)
	b := newBrowser(t, srv.url)
	b.login(readerToken, "ada")
	events := followEvents(t, b)
	events.next("ping")
	srv.Drain()
	for events.events.Scan() {
		if line := events.events.Text(); strings.HasPrefix(line, "event: ") {
			t.Errorf("a draining registry sent %q", line)
		}
	}
	if a := b.do("GET", "/events", nil); a.status != http.StatusOK || len(a.body) != 0 {
		t.Errorf("a new stream while draining: %d %q, want 200 and nothing", a.status, a.body)
	}
}

// TestUIJobLinksReachTheirJob: a job ID the browser or the mux would clean
// into another path ("a/../b" into "b") links to its own page, whose
// actions then act on it, not on the job the cleaned path names.
func TestUIJobLinksReachTheirJob(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	b := newBrowser(t, srv.url)
	b.login(operatorToken, "ada")
	for _, job := range []string{"a/../b", "a//b", "x/.", "./y", "team/a:b"} {
		startRun(t, store, job)
		a := b.do("GET", jobURL(job), nil)
		if a.status != http.StatusOK || !strings.Contains(string(a.body), ">"+job+"<") {
			t.Errorf("%q: GET %s = %d, want its own page", job, jobURL(job), a.status)
		}
	}
}

package registry

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry/api"
)

// screenshotDir is where the browser tests leave a screenshot of each page
// they visit (not committed; see .gitignore).
const screenshotDir = "ui-screenshots"

// chromium starts Debian's chromium, headless, with a fresh profile, and
// returns a browser context that ends with the test. It fails the test
// when chromium is missing: `make deps` installs it, and a page nobody
// looked at in a browser is not tested.
func chromium(t *testing.T) context.Context {
	t.Helper()
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Fatalf("chromium is not installed (make deps installs it: apt-get install chromium): %v", err)
	}
	if err := os.MkdirAll(screenshotDir, 0o755); err != nil {
		t.Fatal(err)
	}
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path),
		chromedp.Flag("headless", true),
		chromedp.Flag("no-sandbox", true),
		chromedp.Flag("disable-gpu", true),
		chromedp.Flag("no-first-run", true),
		chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()),
		chromedp.WindowSize(1280, 900),
	)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate("about:blank")); err != nil {
		t.Fatalf("starting chromium: %v", err)
	}
	return ctx
}

// browserGuard bounds each step of a browser test, only to catch a hung
// browser: on a loaded machine Chromium takes tens of seconds to lay out
// the page of a thousand jobs.
const browserGuard = 90 * time.Second

// step runs actions with a generous hang guard, failing the test with
// what it was doing.
func step(t *testing.T, ctx context.Context, what string, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, browserGuard)
	defer cancel()
	if err := chromedp.Do(ctx, actions...); err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// eval returns the value of a JavaScript expression on the page.
func eval[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	if err != nil {
		t.Fatalf("%s: %v", expr, err)
	}
	return v
}

// until waits for a JavaScript expression to be true on the page.
func until(t *testing.T, ctx context.Context, what, expr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(ctx, browserGuard)
	defer cancel()
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(25*time.Second))); err != nil {
		t.Fatalf("waiting for %s (%s): %v", what, expr, err)
	}
}

// screenshot saves the whole page as ui-screenshots/name.png (quality
// 100 is PNG).
func screenshot(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	if err := os.WriteFile(filepath.Join(screenshotDir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// click clicks the element sel and waits for the page it loads to show
// want.
func click(t *testing.T, ctx context.Context, sel, want string) {
	t.Helper()
	wait, cancel := context.WithTimeout(ctx, browserGuard)
	defer cancel()
	if err := chromedp.Do(wait, chromedp.Click(chromedp.CSS(sel)), chromedp.WaitVisible(chromedp.CSS(want))); err != nil {
		page, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + ": " + document.body.innerText`))
		t.Fatalf("clicking %s, waiting for %s: %v; the page is %s", sel, want, err, page)
	}
}

func browserLogin(t *testing.T, ctx context.Context, base, token, name string) {
	t.Helper()
	step(t, ctx, "opening the page", chromedp.Navigate(base+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	if loc := eval[string](t, ctx, "location.pathname"); loc != "/login" {
		t.Fatalf("the page without a session is at %s, want /login", loc)
	}
	step(t, ctx, "logging in", chromedp.SendKeys(chromedp.CSS("#name"), name), chromedp.SendKeys(chromedp.CSS("#token"), token))
	click(t, ctx, "#login", "#rows")
}

// rowIs is a JavaScript test of the jobs table's row of job.
func rowIs(job, state string) string {
	return fmt.Sprintf(`[...document.querySelectorAll("#rows tr")].some(tr => tr.dataset.job === %q && tr.dataset.state === %q && !tr.hidden)`, job, state)
}

// TestUIInBrowser is on-call's night, in a real browser: log in, see a run
// appear and finish without reloading, open its history, quarantine and
// release it, log out; as a reader, see no buttons; lose contact.
func TestUIInBrowser(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	ctx := chromium(t)
	const job = "nightly/report:eu@2026+v=1"

	browserLogin(t, ctx, srv.url, operatorToken, "ada")
	screenshot(t, ctx, "01-jobs-empty")
	if who := eval[string](t, ctx, `document.getElementById("who").textContent`); who != "ada (operator)" {
		t.Errorf("the page says %q is logged in", who)
	}
	cookie := eval[string](t, ctx, "document.cookie")
	if strings.Contains(cookie, sessionCookie) {
		t.Errorf("the session cookie is readable by script: %q", cookie)
	}

	var l api.Lease
	request(t, srv.url, "POST", api.PathAcquire, workerToken, acquireBody(job, "w1", time.Minute)).decode(t, &l)
	until(t, ctx, "the run to appear", rowIs(job, "RUNNING"))
	if n := eval[string](t, ctx, `document.querySelector('[data-count="RUNNING"]').textContent`); n != "1" {
		t.Errorf("RUNNING count %s, want 1", n)
	}
	screenshot(t, ctx, "02-jobs-running")
	a := request(t, srv.url, "POST", api.PathComplete, workerToken, api.CompleteRequest{JobID: job, WorkerID: "w1", FencingToken: l.FencingToken, DurationMS: 1200})
	if a.status != http.StatusOK {
		t.Fatalf("complete: %d %s", a.status, a.body)
	}
	until(t, ctx, "the run to finish", rowIs(job, "IDLE"))
	if last := eval[string](t, ctx, `document.querySelector("#rows tr").cells[7].textContent`); !strings.HasPrefix(last, "completed exit 0 after 1.2s") {
		t.Errorf("last outcome %q", last)
	}
	step(t, ctx, "filtering by state", chromedp.SetValue(chromedp.CSS("#state-filter"), "RUNNING"),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("state-filter").dispatchEvent(new Event("change"))`))
	until(t, ctx, "the finished run to be filtered out", `document.getElementById("shown").textContent === "0"`)
	step(t, ctx, "clearing the filter", chromedp.SetValue(chromedp.CSS("#state-filter"), ""),
		chromedp.Evaluate[chromedp.Void](`document.getElementById("state-filter").dispatchEvent(new Event("change"))`))
	screenshot(t, ctx, "03-jobs-finished")

	click(t, ctx, "#rows a", "#history")
	if path := eval[string](t, ctx, "decodeURIComponent(location.pathname)"); path != "/jobs/"+job {
		t.Errorf("the job's page is at %s", path)
	}
	history := eval[string](t, ctx, `document.getElementById("history").textContent`)
	for _, want := range []string{"acquired by w1", "released by w1"} {
		if !strings.Contains(history, want) {
			t.Errorf("history %q lacks %q", history, want)
		}
	}
	request(t, srv.url, "POST", api.PathAcquire, workerToken, acquireBody(job, "w2", time.Minute)).decode(t, &l)
	until(t, ctx, "the job's page to follow the next run", `document.getElementById("record").dataset.state === "RUNNING" && document.getElementById("history").textContent.includes("acquired by w2")`)
	if a := request(t, srv.url, "POST", api.PathRelease, workerToken, api.ReleaseRequest{JobID: job, WorkerID: "w2", FencingToken: l.FencingToken}); a.status != http.StatusOK {
		t.Fatalf("release: %d %s", a.status, a.body)
	}
	until(t, ctx, "the job's page to follow the run's end", `document.getElementById("record").dataset.state === "IDLE" && document.getElementById("history").children.length === 4`)
	screenshot(t, ctx, "04-job")

	const reason = `<script>alert("pwned")</script> loops on bad input`
	step(t, ctx, "giving a reason", chromedp.SendKeys(chromedp.CSS("#quarantine-reason"), reason))
	click(t, ctx, "#quarantine", "#confirm")
	screenshot(t, ctx, "05-confirm-quarantine")
	if st, err := store.Status(context.Background(), job); err != nil || st.Quarantine != nil {
		t.Fatalf("quarantined before confirmation: %+v %v", st, err)
	}
	click(t, ctx, "#confirm", "#history")
	until(t, ctx, "the quarantine in the record", `document.getElementById("record").dataset.state === "QUARANTINED"`)
	history = eval[string](t, ctx, `document.getElementById("history").textContent`)
	if !strings.Contains(history, "quarantined — by ada: "+reason) {
		t.Errorf("history after quarantine: %q", history)
	}
	if shown := eval[[]bool](t, ctx, `[document.getElementById("quarantine").checkVisibility(), document.getElementById("release").checkVisibility()]`); shown[0] || !shown[1] {
		t.Errorf("a quarantined job's page shows quarantine %v, release %v; want only release", shown[0], shown[1])
	}
	if n := eval[int](t, ctx, `document.querySelectorAll("main script, #history *:not(li, time, b)").length`); n != 0 {
		t.Errorf("the reason became %d elements", n)
	}
	screenshot(t, ctx, "06-job-quarantined")
	step(t, ctx, "opening the quarantined jobs", chromedp.Navigate(srv.url+"/quarantine"), chromedp.WaitVisible(chromedp.CSS("main table")))
	if text := eval[string](t, ctx, `document.querySelector("main table").textContent`); !strings.Contains(text, job) || !strings.Contains(text, "ada") || !strings.Contains(text, reason) {
		t.Errorf("quarantined jobs: %q", text)
	}
	screenshot(t, ctx, "07-quarantined")

	click(t, ctx, "main table a", "#release-reason")
	step(t, ctx, "giving a reason", chromedp.SendKeys(chromedp.CSS("#release-reason"), "fixed the input"))
	click(t, ctx, "#release", "#confirm")
	click(t, ctx, "#confirm", "#history")
	history = eval[string](t, ctx, `document.getElementById("history").textContent`)
	if !strings.Contains(history, "released-from-quarantine — by ada: fixed the input") {
		t.Errorf("history after release: %q", history)
	}
	if st, err := store.Status(context.Background(), job); err != nil || st.Quarantine != nil {
		t.Errorf("still quarantined: %+v %v", st, err)
	}
	screenshot(t, ctx, "08-job-released")

	stopRunInBrowser(t, ctx, srv, store, job)

	request(t, srv.url, "POST", api.PathAcquire, workerToken, acquireBody(job, "w4", time.Minute)).decode(t, &l)
	click(t, ctx, "#logout", "#token")
	step(t, ctx, "opening the jobs after logout", chromedp.Navigate(srv.url+"/"), chromedp.WaitVisible(chromedp.CSS("#token")))
	screenshot(t, ctx, "09-logged-out")

	browserLogin(t, ctx, srv.url, readerToken, "bob")
	step(t, ctx, "opening the job as reader", chromedp.Navigate(srv.url+jobURL(job)), chromedp.WaitVisible(chromedp.CSS("#history")))
	if state := eval[string](t, ctx, `document.getElementById("record").dataset.state`); state != "RUNNING" {
		t.Errorf("the job is %s as the reader looks for a stop button, want RUNNING", state)
	}
	if n := eval[int](t, ctx, `document.querySelectorAll('form[action^="/actions/"], #quarantine, #release, #stop').length`); n != 0 {
		t.Errorf("a reader sees %d action forms or buttons", n)
	}
	screenshot(t, ctx, "10-job-as-reader")

	step(t, ctx, "a phone-sized screen", chromedp.EmulateViewport(390, 844), chromedp.Navigate(srv.url+"/"), chromedp.WaitVisible(chromedp.CSS("#rows")))
	if w := eval[int](t, ctx, "document.documentElement.scrollWidth - window.innerWidth"); w > 0 {
		t.Errorf("on a phone the page is %d px wider than the screen", w)
	}
	screenshot(t, ctx, "11-jobs-phone")

	until(t, ctx, "the page to follow events", `document.body.dataset.contact === "live"`)
	srv.Drain()
	until(t, ctx, "the page to say it lost contact", `!document.getElementById("contact").hidden`)
	if text := eval[string](t, ctx, `document.getElementById("contact").textContent`); !strings.Contains(text, "Contact with the registry lost") {
		t.Errorf("contact banner %q", text)
	}
	screenshot(t, ctx, "12-contact-lost")
}

// stopRunInBrowser is on-call stopping a run from job's page: the stop
// button asks for a reason and a confirmation; the job's page and the
// jobs list then show the stop pending; the run, driven through the
// registry as a supervisor would, learns it at its next heartbeat and
// releases as stopped; the list and the history follow.
func stopRunInBrowser(t *testing.T, ctx context.Context, srv *testServer, store leasestore.Driver, job string) {
	t.Helper()
	var l api.Lease
	request(t, srv.url, "POST", api.PathAcquire, workerToken, acquireBody(job, "w3", time.Minute)).decode(t, &l)
	until(t, ctx, "the stop button to show on the running job", `document.getElementById("record").dataset.state === "RUNNING" && document.getElementById("stop").checkVisibility()`)
	const reason = "wedged on a <lock> since 02:00"
	step(t, ctx, "giving a reason to stop", chromedp.SendKeys(chromedp.CSS("#stop-reason"), reason))
	click(t, ctx, "#stop", "#confirm")
	screenshot(t, ctx, "08a-confirm-stop")
	if text := eval[string](t, ctx, `document.querySelector("main").textContent`); !strings.Contains(text, "SIGTERM, then SIGKILL after the run's --grace") {
		t.Errorf("the stop's confirmation does not say what a stop does: %q", text)
	}
	if st, err := store.Status(context.Background(), job); err != nil || st.Holder == nil || st.Holder.Stop != nil {
		t.Fatalf("stopped before confirmation: %+v %v", st, err)
	}
	click(t, ctx, "#confirm", "#history")
	const pending = "stopping — by ada: " + reason
	if got := eval[string](t, ctx, `document.querySelector('#record [data-field="stop"]').textContent`); got != pending {
		t.Errorf("the job's page shows the stop as %q, want %q", got, pending)
	}
	history := eval[string](t, ctx, `document.getElementById("history").textContent`)
	if want := fmt.Sprintf("stop-requested, token %d — by ada: %s", l.FencingToken, reason); !strings.Contains(history, want) {
		t.Errorf("history after the stop %q lacks %q", history, want)
	}
	screenshot(t, ctx, "08b-job-stopping")

	step(t, ctx, "opening the jobs", chromedp.Navigate(srv.url+"/"), chromedp.WaitVisible(chromedp.CSS("#rows")))
	stopCell := fmt.Sprintf(`[...document.querySelectorAll("#rows tr")].find(tr => tr.dataset.job === %q).cells[2].textContent`, job)
	if got := eval[string](t, ctx, stopCell); got != pending {
		t.Errorf("the jobs list shows the stop as %q, want %q", got, pending)
	}
	screenshot(t, ctx, "08c-jobs-stopping")
	var hb api.Heartbeat
	request(t, srv.url, "POST", api.PathHeartbeat, workerToken, api.HeartbeatRequest{JobID: job, WorkerID: "w3", FencingToken: l.FencingToken, TTLMS: 60000}).decode(t, &hb)
	if hb.Stop == nil || hb.Stop.By != "ada" || hb.Stop.Reason != reason {
		t.Fatalf("the run's next heartbeat carries the stop %+v, want by ada: %s", hb.Stop, reason)
	}
	stopped := hb.Stop.ToStore().Detail()
	if a := request(t, srv.url, "POST", api.PathRelease, workerToken, api.ReleaseRequest{JobID: job, WorkerID: "w3", FencingToken: l.FencingToken,
		Result: string(leasestore.ResultFailed), Signal: 15, DurationMS: 2000, Reason: stopped}); a.status != http.StatusOK {
		t.Fatalf("release of the stopped run: %d %s", a.status, a.body)
	}
	until(t, ctx, "the list to show the run stopped", rowIs(job, "IDLE")+" && "+stopCell+` === ""`)
	click(t, ctx, fmt.Sprintf(`#rows tr[data-job=%q] a`, job), "#history")
	if last := eval[string](t, ctx, `document.querySelector('#record [data-field="last"]').textContent`); !strings.Contains(last, stopped) {
		t.Errorf("last outcome %q, want it to say %q", last, stopped)
	}
	if crashes := eval[string](t, ctx, `document.querySelector('#record [data-field="crashes"]').textContent`); crashes != "0 of 3" {
		t.Errorf("a stopped run counted a crash: %s", crashes)
	}
	if eval[bool](t, ctx, `document.getElementById("stop").checkVisibility()`) {
		t.Error("a job at rest shows the stop button")
	}
	screenshot(t, ctx, "08d-job-stopped")
}

// TestUIWeightWithThousandJobs measures the jobs page with 1,000 jobs in
// the browser, all running and then all at rest: bytes over the wire and
// the time to first render. It asserts only that every job is listed; the
// figures are logged and written to ui-screenshots/weight.txt.
func TestUIWeightWithThousandJobs(t *testing.T) {
	store := newUIStore(t)
	srv := newTestServer(t, store, nil)
	ctx := chromium(t)
	const jobs = 1000
	leases := make([]*leasestore.Lease, jobs)
	for i := range jobs {
		req := leasestore.AcquireRequest{Job: fmt.Sprintf("batch/job-%04d", i), Holder: fmt.Sprintf("worker-%04d", i), Host: "host-a", PID: 1000 + i,
			Command: []string{"./run.sh", "--part", fmt.Sprint(i)}, TTL: time.Hour, EvidenceTTL: 2 * time.Hour, MaxCrashes: 3}
		l, err := store.Acquire(context.Background(), req)
		if err != nil {
			t.Fatal(err)
		}
		leases[i] = l
	}
	browserLogin(t, ctx, srv.url, readerToken, "ada")
	var report strings.Builder
	measure := func(what, state, shot string) {
		t.Helper()
		step(t, ctx, "reloading the jobs page", chromedp.Navigate(srv.url+"/"), chromedp.WaitVisible(chromedp.CSS("#rows")))
		if n := eval[int](t, ctx, fmt.Sprintf(`document.querySelectorAll('#rows tr[data-state=%q]').length`, state)); n != jobs {
			t.Fatalf("%s: %d rows %s, want %d", what, n, state, jobs)
		}
		until(t, ctx, "the first paint to be recorded", `performance.getEntriesByName("first-contentful-paint").length > 0`)
		figures := eval[map[string]float64](t, ctx, `(() => {
		const nav = performance.getEntriesByType("navigation")[0];
		const assets = performance.getEntriesByType("resource").filter(r => r.name.includes("/static/"));
		return {
			html_bytes: nav.transferSize,
			html_body_bytes: nav.encodedBodySize,
			html_decoded_bytes: nav.decodedBodySize,
			asset_bytes: assets.reduce((n, r) => n + r.transferSize, 0),
			first_contentful_paint_ms: performance.getEntriesByName("first-contentful-paint")[0].startTime,
			response_end_ms: nav.responseEnd,
			dom_content_loaded_ms: nav.domContentLoadedEventEnd,
		};
	})()`)
		screenshot(t, ctx, shot)
		fmt.Fprintf(&report, "jobs page with %d jobs %s: html %.0f bytes over the wire (body %.0f, %.0f uncompressed), script and style %.0f bytes; "+
			"first contentful paint %.0f ms, response end %.0f ms, DOMContentLoaded %.0f ms\n",
			jobs, what, figures["html_bytes"], figures["html_body_bytes"], figures["html_decoded_bytes"], figures["asset_bytes"],
			figures["first_contentful_paint_ms"], figures["response_end_ms"], figures["dom_content_loaded_ms"])
	}
	measure("running", "RUNNING", "13-jobs-1000")
	for _, l := range leases {
		if err := store.Release(context.Background(), l, leasestore.Outcome{Result: leasestore.ResultCompleted, Duration: 90 * time.Second}); err != nil {
			t.Fatal(err)
		}
	}
	measure("at rest", "IDLE", "14-jobs-1000-at-rest")
	t.Log(report.String())
	if err := os.WriteFile(filepath.Join(screenshotDir, "weight.txt"), []byte(report.String()), 0o644); err != nil {
		t.Fatal(err)
	}
}

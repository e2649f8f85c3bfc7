package registry

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// uiStatusReads is how many job statuses the jobs page reads from the
// store at once.
const uiStatusReads = 8

// jobRow is one job as the page shows it, every field already in words:
// the page's script only puts them in place, as text.
type jobRow struct {
	Job         string `json:"job"`
	URL         string `json:"url"`
	State       string `json:"state"`
	Holder      string `json:"holder"`
	Token       string `json:"token"`
	Since       string `json:"since"`
	Expires     string `json:"expires"`
	Last        string `json:"last"`
	LastSuccess string `json:"last_success"`
	Crashes     string `json:"crashes"`
	Quarantine  string `json:"quarantine"`
	Stop        string `json:"stop"` // a stop asked for and not yet done
}

// uiTime is a time as the page shows it, in UTC, sortable as text.
func uiTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// jobURL is the path of job's page, escaped.
func jobURL(job string) string {
	if slices.ContainsFunc(strings.Split(job, "/"), func(seg string) bool { return seg == "" || seg == "." || seg == ".." }) {
		// A path the browser or the mux would clean into another job's
		// ("a/../b", "a//b"): the ID as one segment, its slashes escaped.
		return "/jobs/" + url.PathEscape(job)
	}
	return (&url.URL{Path: "/jobs/" + job}).EscapedPath()
}

// rowOf puts st in words.
func rowOf(st *leasestore.JobStatus) jobRow {
	r := jobRow{Job: st.Job, URL: jobURL(st.Job), State: string(st.State), Crashes: fmt.Sprint(st.Crashes), LastSuccess: uiTime(st.LastSuccess)}
	if st.MaxCrashes > 0 {
		r.Crashes = fmt.Sprintf("%d of %d", st.Crashes, st.MaxCrashes)
	}
	if st.LastToken > 0 {
		r.Token = fmt.Sprint(st.LastToken)
	}
	if h := st.Holder; h != nil {
		r.Holder = fmt.Sprintf("%s on %s, pid %d", h.Worker, h.Host, h.PID)
		r.Token, r.Since, r.Expires = fmt.Sprint(h.Token), uiTime(h.StartedAt), uiTime(h.ExpiresAt)
		if sr := h.Stop; sr != nil {
			r.Stop = fmt.Sprintf("stopping — by %s: %s", sr.By, sr.Reason)
		}
	}
	if o := st.LastOutcome; o != nil {
		r.Last = o.Detail() + ", " + uiTime(o.FinishedAt)
	}
	if q := st.Quarantine; q != nil {
		r.Quarantine = fmt.Sprintf("by %s: %s", q.By, q.Reason)
	}
	return r
}

// jobNames are the jobs the page lists, sorted: the first ui.maxJobs the
// store knows, by ID, and every live and quarantined one. more reports
// that the store knows more than it lists.
func (s *Server) jobNames(ctx context.Context) (names []string, more bool, err error) {
	known, err := s.cfg.Store.Jobs(ctx, "", s.ui.maxJobs+1)
	if err != nil {
		return nil, false, err
	}
	if more = len(known) > s.ui.maxJobs; more {
		known = known[:s.ui.maxJobs]
	}
	leases, err := s.cfg.Store.Leases(ctx)
	if err != nil {
		return nil, false, err
	}
	quarantined, err := s.cfg.Store.Quarantined(ctx)
	if err != nil {
		return nil, false, err
	}
	names = known
	for _, h := range leases {
		names = append(names, h.Job)
	}
	for _, q := range quarantined {
		names = append(names, q.Job)
	}
	slices.Sort(names)
	return slices.Compact(names), more, nil
}

// jobRows reads the status of every job the page lists, uiStatusReads at
// a time.
func (s *Server) jobRows(ctx context.Context) ([]jobRow, bool, error) {
	names, more, err := s.jobNames(ctx)
	if err != nil {
		return nil, false, err
	}
	rows := make([]jobRow, len(names))
	errs := make([]error, len(names))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(uiStatusReads, len(names)) {
		wg.Go(func() {
			for i := range next {
				st, err := s.cfg.Store.Status(ctx, names[i])
				if err != nil {
					errs[i] = err
					continue
				}
				rows[i] = rowOf(st)
			}
		})
	}
	for i := range names {
		next <- i
	}
	close(next)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, false, err
		}
	}
	return rows, more, nil
}

// jobsPage is the list of jobs with their counts by state.
type jobsPage struct {
	Rows   []jobRow
	Counts []stateCount
	Listed int  // the bound on the jobs listed
	More   bool // the store knows more jobs than that
}

// stateCount is how many listed jobs are in State.
type stateCount struct {
	State string
	N     int
}

func (jobsPage) title() string { return "Jobs" }
func (jobsPage) live()         {}

// uiStates are the job states, in the order the page counts them.
var uiStates = [...]leasestore.State{leasestore.StateRunning, leasestore.StateCrashed, leasestore.StateQuarantined, leasestore.StateIdle}

func (s *Server) jobsPage(p *uiRequest) {
	ctx, cancel := context.WithTimeout(p.r.Context(), s.cfg.OpTimeout)
	defer cancel()
	rows, more, err := s.jobRows(ctx)
	if err != nil {
		s.uiStoreError(p, err)
		return
	}
	page := jobsPage{Rows: rows, Listed: s.ui.maxJobs, More: more}
	for _, st := range uiStates {
		n := 0
		for _, r := range rows {
			if r.State == string(st) {
				n++
			}
		}
		page.Counts = append(page.Counts, stateCount{State: string(st), N: n})
	}
	s.render(p, http.StatusOK, page)
}

// jobPage is one job: its record, holder, history and actions.
type jobPage struct {
	Row     jobRow
	Status  *leasestore.JobStatus
	History []leasestore.Event // newest first
}

func (jp jobPage) title() string { return "Job " + jp.Row.Job }
func (jobPage) live()            {}

func (s *Server) jobPage(p *uiRequest) {
	job := p.r.PathValue("job_id")
	p.x.job = job
	if err := leasestore.ValidateJobID(job); err != nil {
		s.uiError(p, http.StatusBadRequest, err.Error())
		return
	}
	ctx, cancel := context.WithTimeout(p.r.Context(), s.cfg.OpTimeout)
	defer cancel()
	st, err := s.cfg.Store.Status(ctx, job)
	if err != nil {
		s.uiStoreError(p, err)
		return
	}
	history := slices.Clone(st.History)
	slices.Reverse(history)
	s.render(p, http.StatusOK, jobPage{Row: rowOf(st), Status: st, History: history})
}

// quarantinePage lists the quarantined jobs with who and why.
type quarantinePage struct{ Jobs []leasestore.Quarantine }

func (quarantinePage) title() string { return "Quarantined jobs" }

func (s *Server) quarantinePage(p *uiRequest) {
	ctx, cancel := context.WithTimeout(p.r.Context(), s.cfg.OpTimeout)
	defer cancel()
	list, err := s.cfg.Store.Quarantined(ctx)
	if err != nil {
		s.uiStoreError(p, err)
		return
	}
	s.render(p, http.StatusOK, quarantinePage{Jobs: list})
}

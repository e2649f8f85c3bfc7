package inspect

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/leasectl/leasectl/leasestore"
)

// JobSeriesLimit bounds the jobs the reaper's metrics carry series of (the
// job label): Prometheus keeps every series in memory and each pass reads
// each such job's status, so a store with very many jobs must not turn into
// as many series. The overdue jobs come first, then the jobs the store
// lists first by ID (Store.Jobs); past the limit, the other jobs have no
// series and leasectl_job_series_truncated is 1. The store-wide gauges
// (leasectl_overdue_jobs, leasectl_quarantined_jobs) count every job.
const JobSeriesLimit = 1000

// JobSeriesEvery is how often at most a reaper refreshes the per-job
// series: a refresh reads the status of up to JobSeriesLimit jobs (and the
// embedded store's job list reads every job's record), far more than the
// rest of a pass, which reads the overdue jobs alone.
const JobSeriesEvery = time.Minute

// jobStatusWorkers is how many job statuses a pass reads at once: enough
// to overlap the round trips of a remote store, few enough to leave it to
// the runs.
const jobStatusWorkers = 4

// jobSeries is what the metrics export of one job.
type jobSeries struct {
	st *leasestore.JobStatus
	// leaseLost counts the lease-lost events this reaper saw in the job's
	// history; lostSeen is the newest one counted.
	leaseLost uint64
	lostSeen  time.Time
}

// refreshJobs reads the status of the jobs the metrics carry series of
// (JobSeriesLimit: overdue first, then the store's first by ID) and
// replaces their series, at most once per JobSeriesEvery. Nothing without
// Metrics.
func (r *Reaper) refreshJobs(ctx context.Context, overdue []leasestore.Overdue) error {
	at := r.now()
	if r.Metrics == nil || !r.jobsRefreshed.IsZero() && at.Sub(r.jobsRefreshed) < JobSeriesEvery {
		return nil
	}
	// One more than the limit says whether there are more.
	known, err := r.Store.Jobs(ctx, "", JobSeriesLimit+1)
	if err != nil {
		return fmt.Errorf("list the jobs for their metrics: %w", err)
	}
	jobs := make([]string, 0, len(overdue)+len(known))
	for _, o := range overdue {
		jobs = append(jobs, o.Job)
	}
	jobs = append(jobs, known...)
	slices.Sort(jobs)
	jobs = slices.Compact(jobs)
	truncated := len(jobs) > JobSeriesLimit
	if len(jobs) > JobSeriesLimit {
		jobs = keepOverdue(jobs, overdue)
	}
	statuses, err := r.statuses(ctx, jobs)
	if err != nil {
		return err
	}
	r.Metrics.observeJobs(statuses, truncated)
	r.jobsRefreshed = at
	return nil
}

// keepOverdue is the first JobSeriesLimit of jobs, every overdue job among
// them.
func keepOverdue(jobs []string, overdue []leasestore.Overdue) []string {
	late := map[string]bool{}
	for _, o := range overdue {
		late[o.Job] = true
	}
	slices.SortStableFunc(jobs, func(a, b string) int {
		switch {
		case late[a] == late[b]:
			return 0
		case late[a]:
			return -1
		default:
			return 1
		}
	})
	return jobs[:JobSeriesLimit]
}

// statuses reads the status of each job, jobStatusWorkers at a time.
func (r *Reaper) statuses(ctx context.Context, jobs []string) ([]*leasestore.JobStatus, error) {
	out := make([]*leasestore.JobStatus, len(jobs))
	errs := make([]error, len(jobs))
	next := make(chan int)
	var wg sync.WaitGroup
	for range min(jobStatusWorkers, len(jobs)) {
		wg.Go(func() {
			for i := range next {
				out[i], errs[i] = r.Store.Status(ctx, jobs[i])
			}
		})
	}
	for i := range jobs {
		next <- i
	}
	close(next)
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			return nil, fmt.Errorf("status of job %s for its metrics: %w", jobs[i], err)
		}
	}
	return out, nil
}

// observeJobs replaces the jobs' series with statuses, keeping the
// lease-lost counts of the jobs still there.
func (m *Metrics) observeJobs(statuses []*leasestore.JobStatus, truncated bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	jobs := make(map[string]*jobSeries, len(statuses))
	for _, st := range statuses {
		s := m.jobs[st.Job]
		if s == nil {
			s = &jobSeries{}
		}
		s.st = st
		for _, e := range st.History {
			if e.Kind == leasestore.EventLeaseLost && e.At.After(s.lostSeen) {
				s.leaseLost++
				s.lostSeen = e.At
			}
		}
		jobs[st.Job] = s
	}
	m.jobs, m.truncated = jobs, truncated
}

func (m *Metrics) observeOverdue(list []leasestore.Overdue) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.overdueJobs = len(list)
}

func (m *Metrics) observePass(at time.Time) {
	if m == nil {
		return
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	m.lastPass = at
}

// results are the results a run can end with, each a series of
// leasectl_job_last_run_result.
var results = []leasestore.Result{
	leasestore.ResultCompleted, leasestore.ResultFailed, leasestore.ResultCrashed, leasestore.ResultNotStarted,
}

// writeJobs writes the store-wide gauges of the expectations and the
// jobs' series, ordered by job. m.mu is held.
func (m *Metrics) writeJobs(b *strings.Builder) {
	family(b, "leasectl_overdue_jobs", "gauge", "Jobs past their expectation (leasectl expect, run --expect-every), as of the last successful pass.")
	sample(b, "leasectl_overdue_jobs", "", float64(m.overdueJobs))
	family(b, "leasectl_reaper_last_success_timestamp_seconds", "gauge", "When the reaper's last pass that succeeded ended, by its clock (0: none yet).")
	sample(b, "leasectl_reaper_last_success_timestamp_seconds", "", seconds(m.lastPass))
	family(b, "leasectl_job_series_truncated", "gauge", fmt.Sprintf("1 when the store has more jobs than the %d the metrics carry series of.", JobSeriesLimit))
	sample(b, "leasectl_job_series_truncated", "", boolValue(m.truncated))

	jobs := make([]string, 0, len(m.jobs))
	for job := range m.jobs {
		jobs = append(jobs, job)
	}
	slices.Sort(jobs)
	each := func(name, kind, help string, value func(s *jobSeries) (float64, bool)) {
		family(b, name, kind, help)
		for _, job := range jobs {
			if v, ok := value(m.jobs[job]); ok {
				sample(b, name, jobLabel(job), v)
			}
		}
	}
	each("leasectl_job_last_success_timestamp_seconds", "gauge", "When the job last completed successfully, by the store's clock; absent if never.",
		func(s *jobSeries) (float64, bool) { return seconds(s.st.LastSuccess), !s.st.LastSuccess.IsZero() })
	each("leasectl_job_last_run_duration_seconds", "gauge", "How long the job's last finished run took.",
		func(s *jobSeries) (float64, bool) {
			if s.st.LastOutcome == nil {
				return 0, false
			}
			return s.st.LastOutcome.Duration.Seconds(), true
		})
	family(b, "leasectl_job_last_run_result", "gauge", "1 for the result the job's last finished run ended with, 0 for the others.")
	for _, job := range jobs {
		s := m.jobs[job]
		if s.st.LastOutcome == nil {
			continue
		}
		for _, res := range results {
			sample(b, "leasectl_job_last_run_result", jobLabel(job)+`,result="`+string(res)+`"`, boolValue(s.st.LastOutcome.Result == res))
		}
	}
	each("leasectl_job_expected_interval_seconds", "gauge", "How often the job must complete successfully (its expectation's every plus grace); absent without one.",
		func(s *jobSeries) (float64, bool) {
			if s.st.Expect == nil {
				return 0, false
			}
			return (s.st.Expect.Every + s.st.Expect.Grace).Seconds(), true
		})
	each("leasectl_job_overdue", "gauge", "1 when the job is past its expectation, 0 when it is not; absent without an expectation.",
		func(s *jobSeries) (float64, bool) { return boolValue(s.st.Overdue()), s.st.Expect != nil })
	each("leasectl_job_consecutive_crashes", "gauge", "The job's consecutive crashes (reset by a success or a release from quarantine).",
		func(s *jobSeries) (float64, bool) { return float64(s.st.Crashes), true })
	each("leasectl_job_quarantined", "gauge", "1 when the job is quarantined.",
		func(s *jobSeries) (float64, bool) { return boolValue(s.st.Quarantine != nil), true })
	each("leasectl_job_slots", "gauge", "How many runs of the job may hold a lease at once (run --slots of its last grant).",
		func(s *jobSeries) (float64, bool) { return float64(max(s.st.Slots, 1)), true })
	each("leasectl_job_slots_in_use", "gauge", "The job's live leases: its slots in use.",
		func(s *jobSeries) (float64, bool) { return float64(len(holders(s.st))), true })
	each("leasectl_job_queue_length", "gauge", "The job's runs waiting for a slot (run --wait), lapsed ones left out; 0 on a store that keeps no queue.",
		func(s *jobSeries) (float64, bool) { return float64(len(s.st.Queue)), true })
	each("leasectl_job_lease_lost_total", "counter", "Renewals of the job that came after its lease expired (lease-lost events) this reaper saw.",
		func(s *jobSeries) (float64, bool) { return float64(s.leaseLost), true })
}

// jobLabel is the job_id label of a series: not "job", which Prometheus
// gives every series of a scrape (its scrape job) and would rename ours to
// exported_job. Job IDs hold none of the bytes
// the exposition format escapes, but a label is escaped all the same.
func jobLabel(job string) string {
	return `job_id="` + strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`).Replace(job) + `"`
}

// seconds is t in seconds since the Unix epoch, 0 for the zero time.
func seconds(t time.Time) float64 {
	if t.IsZero() {
		return 0
	}
	return float64(t.UnixMicro()) / 1e6
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

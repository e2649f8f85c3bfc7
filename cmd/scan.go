package cmd

import (
	"context"
	"fmt"
	"net"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/outbox"
)

// defaultScanInterval is how often `scan --watch` looks for crashes. A
// crash is found within the job's TTL plus this interval; shorter costs the
// store one more scan per interval (cheap: a scan's cost follows the
// crashed jobs, not all jobs).
const defaultScanInterval = 10 * time.Second

// minPassTimeout is the least time one pass of `scan --watch` may take
// before it is abandoned as failed: a pass bounded by a short interval
// alone would fail on a merely slow store.
const minPassTimeout = 5 * time.Second

// ScanOptions are `leasectl scan`'s inputs.
type ScanOptions struct {
	IO        *IOStreams
	Now       func() time.Time
	OpenStore func(context.Context) (*leasestore.Store, error)
	Logger    func() (zerolog.Logger, error)
	// Outbox returns this host's outbox, whose late outcomes each pass
	// delivers first; nil when there is none.
	Outbox func() *outbox.Box

	Watch       bool
	Interval    time.Duration
	MetricsAddr string
	JSON        bool
	// Overdue lists the overdue jobs (after the crashes) on stdout.
	Overdue bool
	// FailOn names what makes a single scan exit exitFound: "crashed",
	// "overdue", "quarantined".
	FailOn []string
	// Namespace is the events' namespace field.
	Namespace string
	Notify    NotifyOptions
}

// NewCmdScan builds `leasectl scan`. runF, when not nil, replaces the
// command's work, so a test can stop after flag parsing.
func NewCmdScan(f *Factory, runF func(*ScanOptions) error) *cobra.Command {
	opts := &ScanOptions{IO: f.IO, Now: f.Now, OpenStore: f.OpenStore, Logger: f.Logger, Outbox: f.hostOutbox, Namespace: f.Globals.Namespace}
	c := &cobra.Command{
		Use:   "scan [--overdue] [--fail-on WHAT] [--watch [--interval D] [--metrics-addr ADDR]]",
		Short: "Find crashed runs, count each crash once, quarantine poison jobs",
		Long: `The reaper. Find the runs whose supervisor vanished (SIGKILL, a host that
went down): their crash evidence is in the store but their lease expired
without a release. Each such crash is counted exactly once, whether this scan
or the job's next run finds it first, and a job that reaches the crash
threshold its last run was started with (--max-crashes) is quarantined.

Prints what it found: job, worker, host, pid, when it started, how long it
had been stale, its consecutive crashes, and whether it is now quarantined.

It also looks for the jobs past their expectation (leasectl expect, run
--expect-every): a job that did not complete successfully for longer than
its period plus grace. Each is a warning on stderr ("job X is overdue: last
succeeded 3h ago, expected every 1h (grace 10m)"); --overdue lists them on
stdout too, after the crashes: job, last success, silent for, every, grace,
overdue by (with --json, the output is then {"crashes": [...], "overdue":
[...]} instead of the crashes' array). --fail-on crashed,overdue,quarantined
makes a single scan exit 81 when it counted a crash, found an overdue job,
or the store holds a quarantined job, for scripts and cron checks.

With --watch, scans every --interval until SIGTERM or SIGINT, then exits 0.
A job that becomes overdue is a warning in the log, once, and one that is
back in time an info line.
A crash is found within its job's TTL plus the interval. A failed pass (the
store unreachable) is logged and the reaper goes on. Each pass first
delivers the outcomes that runs on this host could not record in time (a
partition), which corrects the crashes counted for them. Each pass that finds
crashes prints them; with --json, as one JSON object per line.

--metrics-addr serves Prometheus metrics at http://ADDR/metrics:
leasectl_recovered_crashes_total, leasectl_stale_duration_seconds,
leasectl_reaper_runs_total, leasectl_reaper_errors_total,
leasectl_quarantined_jobs, leasectl_inflight_jobs, leasectl_overdue_jobs,
leasectl_reaper_last_success_timestamp_seconds, and per job (label job_id,
at most 1,000 jobs: the overdue first, then the first by ID;
leasectl_job_series_truncated says when there are more)
leasectl_job_last_success_timestamp_seconds,
leasectl_job_last_run_duration_seconds, leasectl_job_last_run_result,
leasectl_job_expected_interval_seconds, leasectl_job_overdue,
leasectl_job_consecutive_crashes, leasectl_job_quarantined and
leasectl_job_lease_lost_total. Each pass then also reads those jobs'
statuses.

` + notifyHelp + `
` + outputHelp + `

Exit status: 0 whether crashes were found or not (also after SIGTERM or
SIGINT with --watch), 81 when --fail-on names what the scan found, 64 for
bad flags, 69 if the store is unreachable (a single scan only), 1 if
--watch cannot serve its metrics.`,
		Example: `  leasectl scan
  leasectl scan --json | jq -r '.[] | select(.quarantined) | .job'
  leasectl scan --overdue --fail-on overdue,quarantined
  leasectl scan --watch --interval 5s --metrics-addr 127.0.0.1:9465
  leasectl scan --watch --notify-webhook https://hooks.example.com/leasectl --notify-command 'logger -t leasectl'`,
		Args: noArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := validateScan(c, opts); err != nil {
				return usageError(err)
			}
			if runF != nil {
				return runF(opts)
			}
			return scanRun(c.Context(), opts)
		},
	}
	c.Flags().BoolVar(&opts.Watch, "watch", false, "keep scanning every --interval until SIGTERM or SIGINT")
	c.Flags().DurationVar(&opts.Interval, "interval", defaultScanInterval, "time between scans with --watch")
	c.Flags().StringVar(&opts.MetricsAddr, "metrics-addr", "", "with --watch, serve Prometheus metrics at http://ADDR/metrics (host:port)")
	c.Flags().BoolVar(&opts.JSON, "json", false, jsonFlagHelp)
	c.Flags().BoolVar(&opts.Overdue, "overdue", false, "list the overdue jobs on stdout too, after the crashes")
	c.Flags().StringSliceVar(&opts.FailOn, "fail-on", nil, "exit 81 when the scan finds any of these: crashed, overdue, quarantined (comma-separated)")
	opts.Notify.addFlags(c.Flags())
	return c
}

// outbox returns the host's outbox, or nil when there is none.
func (opts *ScanOptions) outbox() *outbox.Box {
	if opts.Outbox == nil {
		return nil
	}
	return opts.Outbox()
}

func validateScan(c *cobra.Command, opts *ScanOptions) error {
	if !opts.Watch {
		for _, name := range []string{"interval", "metrics-addr", opts.Notify.changed(c.Flags())} {
			if name != "" && c.Flags().Changed(name) {
				return fmt.Errorf("--%s needs --watch", name)
			}
		}
	}
	if err := opts.Notify.validate(); err != nil {
		return err
	}
	for _, name := range []string{"overdue", "fail-on"} {
		if opts.Watch && c.Flags().Changed(name) {
			return fmt.Errorf("--%s is for a single scan, not --watch (which logs the overdue jobs and serves their metrics)", name)
		}
	}
	for _, what := range opts.FailOn {
		if !slices.Contains(failOnChoices, what) {
			return fmt.Errorf("invalid --fail-on %q: want any of %s, comma-separated", what, strings.Join(failOnChoices, ","))
		}
	}
	if opts.Interval <= 0 {
		return fmt.Errorf("invalid --interval %s: it must be positive", opts.Interval)
	}
	if opts.MetricsAddr != "" {
		if _, _, err := net.SplitHostPort(opts.MetricsAddr); err != nil {
			return fmt.Errorf("invalid --metrics-addr %q: want host:port, e.g. 127.0.0.1:9465", opts.MetricsAddr)
		}
	}
	return nil
}

func scanRun(ctx context.Context, opts *ScanOptions) error {
	if opts.Watch {
		return scanWatch(ctx, opts)
	}
	return withStore(ctx, opts.OpenStore, func(ctx context.Context, s *leasestore.Store) error {
		if box := opts.outbox(); box != nil && box.Pending() {
			log, err := opts.Logger()
			if err != nil {
				return err
			}
			deliverOutbox(ctx, box, s, log, onCallTimeout)
		}
		return scanOnce(ctx, opts, s)
	})
}

// scanWatch is the reaper as a service: it logs to stderr, prints crashes
// on stdout, and ends cleanly on SIGTERM or SIGINT.
func scanWatch(ctx context.Context, opts *ScanOptions) (err error) {
	log, err := opts.Logger()
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	openCtx, cancelOpen := context.WithTimeout(ctx, onCallTimeout)
	s, err := opts.OpenStore(openCtx)
	cancelOpen()
	if err != nil {
		return err
	}
	defer func() {
		if cerr := s.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close the store: %w", cerr)
		}
	}()

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	box := opts.outbox()
	reaper := &inspect.Reaper{Store: s, PassTimeout: max(opts.Interval, minPassTimeout),
		BeforePass: func(ctx context.Context) { deliverOutbox(ctx, box, s, log, max(opts.Interval, minPassTimeout)) }}
	serveDone := make(chan error, 1)
	if opts.MetricsAddr == "" {
		serveDone <- nil
	} else {
		reaper.Metrics = inspect.NewMetrics()
		ln, err := net.Listen("tcp", opts.MetricsAddr)
		if err != nil {
			return fmt.Errorf("serve metrics: %w", err)
		}
		log.Info().Str("addr", ln.Addr().String()).Msgf("serving metrics on http://%s/metrics", ln.Addr())
		go func() {
			err := reaper.Metrics.Serve(ctx, ln)
			if err != nil {
				cancel() // a reaper whose metrics went dark must not go on silently
			}
			serveDone <- err
		}()
	}

	ticker := time.NewTicker(opts.Interval)
	defer ticker.Stop()
	log.Info().Dur("interval", opts.Interval).Msg("watching for crashed jobs until SIGTERM or SIGINT")
	p := printer(opts.IO, opts.JSON, opts.Now())
	reaper.OnOverdue = func(c inspect.OverdueChange) error {
		logOverdue(log, c)
		return nil
	}
	reaper.Unsupported = noOverdue(log)
	defer opts.Notify.startNotifier(ctx, s, reaper, opts.Namespace, opts.Interval, log)()
	werr := reaper.Watch(ctx, ticker.C, p.CrashStream,
		func(err error) { log.Error().Err(err).Msg("scan pass failed; retrying at the next interval") })
	cancel()
	if serr := <-serveDone; serr != nil {
		return serr
	}
	if werr != nil {
		return werr
	}
	log.Info().Msg("reaper stopped")
	return nil
}

package cmd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/supervise"
)

// RunOptions is what `leasectl run` was asked to do.
type RunOptions struct {
	Factory          *Factory
	Config           supervise.Config
	ConflictExitCode int
}

// forwarded are the signals `run` forwards to the child's process group.
var forwarded = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2}

// NewCmdRun builds `leasectl run`. runF, when not nil, replaces the work so
// tests can stop after flag parsing.
func NewCmdRun(f *Factory, runF func(*RunOptions) error) *cobra.Command {
	opts := &RunOptions{Factory: f}
	c := &opts.Config
	cmd := &cobra.Command{
		Use:   "run --job ID [flags] -- CMD [ARGS...]",
		Short: "Run a command under a time-bound lease",
		Long: `Acquire the lease for --job, start CMD with a fencing token in its environment,
renew the lease in the background, and SIGKILL CMD's whole process group the
moment renewal misses its safety window: always before the store could hand
the lease to someone else. When CMD exits, its outcome is recorded and the lease
released; leasectl exits with CMD's exit code.

CMD runs without a shell, with leasectl's stdin, stdout and stderr, in its own
process group, and gets LEASECTL_JOB_ID, LEASECTL_FENCING_TOKEN,
LEASECTL_WORKER_ID, LEASECTL_ATTEMPT and LEASECTL_LEASE_TTL_MS.

Timing rules: --heartbeat ≤ --ttl/3; --heartbeat < --safety < --ttl;
--grace ≤ --ttl; --evidence-ttl > --ttl + 1m; --max-crashes ≥ 2.

Exit codes: CMD's own (128+N if it died of signal N); 64 usage; 69 store
unavailable; 75 held elsewhere (--conflict-exit-code); 76 quarantined;
124 --max-runtime passed; 125 lease lost, CMD killed; 126/127 CMD not
executable / not found. A --min-interval skip exits 0.`,
		Example: `  # Run once at a time across every host sharing the store:
  leasectl run --job hello -- echo hello

  # Wait up to a minute for the current holder instead of exiting 75:
  leasectl run --job nightly-report --wait --wait-timeout 1m -- sh -c 'echo "token $LEASECTL_FENCING_TOKEN"'

  # The same cron entry on many hosts runs once per hour:
  leasectl run --job hourly-sync --min-interval 50m -- true`,
		Args: func(cmd *cobra.Command, args []string) error {
			dash := cmd.ArgsLenAtDash()
			switch {
			case dash < 0 && len(args) > 0:
				return usageError(fmt.Errorf("put -- before the command: leasectl run --job ID -- %s", args[0]))
			case dash > 0:
				return usageError(fmt.Errorf("unexpected argument %q before --", args[0]))
			case len(args) == 0:
				return usageError(errors.New("no command to run: give it after --, as in: leasectl run --job ID -- CMD [ARGS...]"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			c.Command = args
			if err := positiveDurations(cmd.Flags(), "ttl", "heartbeat", "safety", "evidence-ttl", "grace", "max-runtime", "min-interval", "wait-timeout"); err != nil {
				return err
			}
			if opts.ConflictExitCode < 1 || opts.ConflictExitCode > 255 {
				return usageError(fmt.Errorf("--conflict-exit-code %d must be between 1 and 255", opts.ConflictExitCode))
			}
			c.SetDefaults()
			if err := c.Validate(); err != nil {
				return usageError(err)
			}
			if runF != nil {
				return runF(opts)
			}
			return runRun(cmd.Context(), opts)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&c.Job, "job", "", "job ID: 1-200 bytes of A-Z a-z 0-9 . _ - : / @ + = (required)")
	fl.DurationVar(&c.TTL, "ttl", supervise.DefaultTTL, "lease TTL: how long the lease outlives the last renewal")
	fl.DurationVar(&c.Heartbeat, "heartbeat", 0, "renewal period (default --ttl/3)")
	fl.DurationVar(&c.Safety, "safety", 0, "kill the child this long after the last confirmed renewal was sent (default --ttl/2)")
	fl.DurationVar(&c.EvidenceTTL, "evidence-ttl", supervise.DefaultEvidenceTTL, "how long a crashed run's evidence is kept")
	fl.IntVar(&c.MaxCrashes, "max-crashes", supervise.DefaultMaxCrashes, "consecutive crashes that quarantine the job")
	fl.BoolVar(&c.Wait, "wait", false, "wait for the lease instead of exiting 75 when it is held (store failures while waiting are retried)")
	fl.DurationVar(&c.WaitTimeout, "wait-timeout", 0, "give up waiting after this long (implies --wait)")
	fl.DurationVar(&c.Grace, "grace", 0, "after SIGINT/SIGTERM (or --max-runtime), SIGKILL the child this much later (default min(10s, --ttl))")
	fl.DurationVar(&c.MaxRuntime, "max-runtime", 0, "stop the child after this long (exit 124)")
	fl.StringVar(&c.WorkerID, "worker-id", "", "this run's worker ID (default host:pid:random)")
	fl.IntVar(&opts.ConflictExitCode, "conflict-exit-code", exitHeld, "exit code when the lease is held elsewhere")
	fl.DurationVar(&c.MinInterval, "min-interval", 0, "skip (exit 0) if the job last succeeded less than this long ago")
	_ = cmd.MarkFlagRequired("job")
	return cmd
}

// positiveDurations refuses a duration flag set to zero or less.
func positiveDurations(fl *pflag.FlagSet, names ...string) error {
	for _, name := range names {
		if !fl.Changed(name) {
			continue
		}
		if d, err := fl.GetDuration(name); err == nil && d <= 0 {
			return usageError(fmt.Errorf("--%s must be positive, got %s", name, d))
		}
	}
	return nil
}

func runRun(ctx context.Context, opts *RunOptions) error {
	f, c := opts.Factory, &opts.Config
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding leasectl's own binary for the watchdog: %w", err)
	}
	watchdog := startEarlyWatchdog(self)
	defer watchdog.discard()
	store, err := f.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	// No signal.Stop: the process ends with this function, and Stop waits
	// for the runtime's signal loop to go idle, which costs every run.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, forwarded...)

	host, _ := os.Hostname()
	c.Host, c.PID = host, os.Getpid()
	if c.WorkerID == "" {
		c.WorkerID = defaultWorkerID(host, c.PID)
	}
	c.Interactive = f.IO.StdinTTY
	log, err := f.Logger()
	if err != nil {
		return err
	}
	if err := supervise.BecomeSubreaper(); err != nil {
		log.Warn().Str("job", c.Job).Str("worker", c.WorkerID).Err(err).Msg("cannot become a child subreaper; descendants that leave the group will not be tracked")
	}
	status := &waitStatus{io: f.IO, job: c.Job, now: f.Now}
	child := &supervise.Command{Argv: c.Command, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Foreground: c.Interactive}
	sup := &supervise.Supervisor{
		Store:       store,
		Clock:       supervise.RealClock{},
		Log:         log,
		Start:       child.Start,
		Watchdog:    watchdog.take,
		Signals:     sigs,
		OnWait:      status.show,
		KillOrphans: supervise.KillOrphans,
	}
	ending, err := sup.Run(ctx, *c)
	status.clear()
	if err != nil {
		return runRefusal(err, c.Job, opts.ConflictExitCode)
	}
	return exitWith(runExitCode(ending), nil)
}

// earlyWatchdog is the watchdog process started as soon as `run` begins, so
// that its fork, exec and start-up overlap leasectl's own set-up and the
// acquire instead of delaying the child.
type earlyWatchdog struct {
	started chan earlyResult
	taken   bool
}

type earlyResult struct {
	wd  *supervise.ProcessWatchdog
	err error
}

func startEarlyWatchdog(self string) *earlyWatchdog {
	e := &earlyWatchdog{started: make(chan earlyResult, 1)}
	go func() {
		wd, err := supervise.StartWatchdog(self, os.Stderr)
		e.started <- earlyResult{wd, err}
	}()
	return e
}

// take hands the watchdog to the Supervisor, which stops it when the run
// ends.
func (e *earlyWatchdog) take() (supervise.Watchdog, error) {
	e.taken = true
	r := <-e.started
	if r.err != nil {
		return nil, r.err
	}
	return r.wd, nil
}

// discard stops the watchdog if the Supervisor never took it (`run` failed
// before it began).
func (e *earlyWatchdog) discard() {
	if e.taken {
		return
	}
	if r := <-e.started; r.wd != nil {
		_ = r.wd.Close()
	}
}

// runRefusal turns a refusal before the child started into its one stderr
// line and exit code.
func runRefusal(err error, job string, conflictCode int) error {
	var tooSoon *leasestore.TooSoonError
	var held *leasestore.HeldError
	var quarantined *leasestore.QuarantinedError
	switch {
	case errors.As(err, &tooSoon):
		return exitWith(exitOK, fmt.Errorf("skipped: %w", err))
	case errors.As(err, &quarantined):
		return exitWith(exitQuarantined, fmt.Errorf("%w; release it with: leasectl quarantine release %s --reason '...'", err, job))
	case errors.As(err, &held):
		return exitWith(conflictCode, err)
	}
	return err
}

func defaultWorkerID(host string, pid int) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%d:%s", host, pid, hex.EncodeToString(b))
}

// waitStatus keeps one status line on a terminal's stderr while --wait
// waits: who holds the job, for how long.
type waitStatus struct {
	io    *IOStreams
	job   string
	now   func() time.Time
	shown bool
}

func (w *waitStatus) show(h *leasestore.HeldError) {
	if !w.io.StderrTTY {
		return
	}
	fmt.Fprintf(w.io.ErrOut, "\r\x1b[Kwaiting for job %s: held by %s on %s (pid %d) for %s, expires in %s",
		w.job, h.Holder, h.Host, h.PID, w.now().Sub(h.Since).Round(time.Second), h.ExpiresIn.Round(100*time.Millisecond))
	w.shown = true
}

func (w *waitStatus) clear() {
	if w.shown {
		fmt.Fprint(w.io.ErrOut, "\r\x1b[K")
	}
}

// NewCmdWatchdog builds the hidden command `run` re-executes as its
// watchdog process.
func NewCmdWatchdog(f *Factory) *cobra.Command {
	return &cobra.Command{
		Use:    supervise.WatchdogArg,
		Hidden: true,
		Args:   cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			return supervise.RunWatchdog(f.IO.In, f.IO.Out, f.IO.ErrOut)
		},
	}
}

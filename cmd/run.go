package cmd

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/leasectl/leasectl/clock"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/supervise"
)

// RunOptions is what `leasectl run` was asked to do.
type RunOptions struct {
	Factory          *Factory
	Config           supervise.Config
	ConflictExitCode int
}

// notified are the signals `run` handles: those it forwards to the child's
// process group, and SIGCONT, which resumes a run stopped with its child
// (Ctrl-Z, then fg).
var notified = []os.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT, syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGCONT}

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
process group, and gets LEASECTL_JOB_ID, LEASECTL_FENCING_TOKEN, LEASECTL_SLOT,
LEASECTL_WORKER_ID, LEASECTL_ATTEMPT and LEASECTL_LEASE_TTL_MS, and the run's
LEASECTL_STORE (password included) and LEASECTL_NAMESPACE, so that
'leasectl token check' in CMD asks the store that granted its token.

With --slots N, at most N runs of the job run at once across every host
sharing the store, each in a slot of its own (LEASECTL_SLOT, from 0) with a
fencing token of its own from the job's one rising sequence. All runs of a
job must agree on N: a run with another N than the job's runs in flight is
refused (exit 64), and a change of N takes effect once none is in flight.
--wait runs are served in the order they started waiting (on the embedded
store, Redis and PostgreSQL; other stores let waiters race).

A crash, which counts toward --max-crashes, is CMD killed by SIGSEGV, SIGBUS,
SIGILL, SIGFPE, SIGTRAP, SIGSYS, SIGABRT, SIGXCPU, SIGXFSZ or a SIGKILL leasectl
did not send (the OOM killer); any other signal (SIGPIPE, someone's SIGTERM)
fails the run, as a non-zero exit does.

Timing rules: --heartbeat ≤ --ttl/3; --heartbeat < --safety < --ttl;
--grace ≤ --ttl; --evidence-ttl > --ttl + 1m; --max-crashes ≥ 2.

Exit codes: CMD's own (128+N if it died of signal N); 0 also for a
--min-interval skip; 64 usage; 69 store unavailable; 75 held elsewhere
(--conflict-exit-code); 76 quarantined; 77 --ttl-deadline passed; 78 the
job belongs to another region (--region); 79 a registry refused it to the
token's role; 80 an operator stopped the run (leasectl stop); 124
--max-runtime passed; 125 lease lost, CMD killed; 126/127 CMD not
executable / not found; 130/143 SIGINT/SIGTERM while waiting for the lease
or before CMD started; 1 leasectl itself failed (it could not start its
watchdog).`,
		Example: `  # Run once at a time across every host sharing the store:
  leasectl run --job hello -- echo hello

  # Wait up to a minute for the current holder instead of exiting 75:
  leasectl run --job nightly-report --wait --wait-timeout 1m -- sh -c 'echo "token $LEASECTL_FENCING_TOKEN"'

  # The same cron entry on many hosts runs once per hour:
  leasectl run --job hourly-sync --min-interval 50m -- true`,
		Args: func(cmd *cobra.Command, args []string) error {
			if err := required(cmd, "job"); err != nil {
				return err
			}
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
			if err := expectFlags(cmd.Flags(), &c.Expect); err != nil {
				return err
			}
			if c.Slots < 1 {
				return usageError(fmt.Errorf("--slots %d must be between 1 and %d", c.Slots, leasestore.MaxSlots))
			}
			if opts.ConflictExitCode < 0 || opts.ConflictExitCode > 255 {
				return usageError(fmt.Errorf("--conflict-exit-code %d must be between 0 and 255", opts.ConflictExitCode))
			}
			c.SetDefaults()
			if err := c.Validate(); err != nil {
				return usageError(defaultHint(err, cmd.Flags()))
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
	fl.DurationVar(&c.Heartbeat, "heartbeat", 0, "renewal period")
	fl.DurationVar(&c.Safety, "safety", 0, "kill the child this long after the last confirmed renewal was sent")
	fl.DurationVar(&c.EvidenceTTL, "evidence-ttl", 0, "how long a crashed run's evidence is kept")
	fl.IntVar(&c.MaxCrashes, "max-crashes", supervise.DefaultMaxCrashes, "consecutive crashes that quarantine the job")
	fl.BoolVar(&c.Wait, "wait", false, "wait for the lease instead of exiting 75 when it is held (store failures while waiting are retried)")
	fl.DurationVar(&c.WaitTimeout, "wait-timeout", 0, "give up waiting after this long (implies --wait)")
	fl.DurationVar(&c.Grace, "grace", 0, "after SIGINT/SIGTERM (or --max-runtime), SIGKILL the child this much later")
	fl.DurationVar(&c.MaxRuntime, "max-runtime", 0, "stop the child after this long (exit 124)")
	fl.StringVar(&c.WorkerID, "worker-id", "", "this run's worker ID (default host:pid:random)")
	fl.IntVar(&opts.ConflictExitCode, "conflict-exit-code", exitHeld, "exit code when the lease is held elsewhere (0: a quiet skip, like flock -E 0)")
	fl.DurationVar(&c.MinInterval, "min-interval", 0, "skip (exit 0) if the job last succeeded less than this long ago")
	fl.IntVar(&c.Slots, "slots", 1, "at most this many runs of the job at once, across every host sharing the store (all its runs must agree)")
	fl.StringVar(&c.Region, "region", "", "this worker's region: a job first granted in a region is refused to workers of others (exit 78); default: a registry URL's ?region=, else any")
	fl.Var(timestampFlag{&c.Deadline}, "ttl-deadline", "the job's hard deadline, an RFC 3339 time: past it by the store's clock (on etcd, the acquiring host's) the job is refused for good (exit 77), also while --wait waits")
	fl.Duration("expect-every", 0, "the job must complete successfully at least this often, or it is overdue (scan, ls, status, metrics); recorded on the job, last writer wins")
	fl.Duration("expect-grace", 0, "with --expect-every: how late a success may be before the job is overdue")
	for name, rule := range ttlDerived {
		fl.Lookup(name).DefValue = rule
	}
	_ = cmd.MarkFlagRequired("job")
	_ = cmd.RegisterFlagCompletionFunc("job", completeJobs(f, knownJobs))
	return cmd
}

// ttlDerived are the defaults of run's flags that follow --ttl, as help,
// man pages and messages write them (supervise.Config.SetDefaults applies
// them).
var ttlDerived = map[string]string{
	"heartbeat":    "--ttl/3",
	"safety":       "--ttl/2",
	"grace":        "min(10s, --ttl)",
	"evidence-ttl": "max(1h, 2×--ttl)",
}

// defaultHint adds to a timing rule broken by a flag the user gave and a
// default they did not, the flag to add: with --safety 2s alone, the
// default --heartbeat (--ttl/3, 10s) is what is too long.
func defaultHint(err error, fl *pflag.FlagSet) error {
	var ce *supervise.ConfigError
	if !errors.As(err, &ce) {
		return err
	}
	given := 0
	for _, name := range ce.Flags {
		if fl.Changed(strings.TrimPrefix(name, "--")) {
			given++
		}
	}
	if given == 0 {
		return err
	}
	for _, name := range ce.Flags {
		f := fl.Lookup(strings.TrimPrefix(name, "--"))
		if f == nil || f.Changed {
			continue
		}
		return fmt.Errorf("%w; %s was not given (default %s): add %s", err, name, f.DefValue, name)
	}
	return err
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
	format, err := f.logFormat()
	if err != nil {
		return err
	}
	status := &waitStatus{io: f.IO, job: c.Job, now: f.Now, refresh: format == formatConsole && f.IO.StderrTTY}
	log, err := f.loggerTo(status)
	if err != nil {
		return err
	}
	self, err := os.Executable()
	if err != nil {
		return fmt.Errorf("finding leasectl's own binary for the watchdog: %w", err)
	}
	host, _ := os.Hostname()
	c.Host, c.PID = host, os.Getpid()
	if c.WorkerID == "" {
		c.WorkerID = defaultWorkerID(host, c.PID)
	}
	// First of all the I/O, so that the watchdog's start-up overlaps
	// opening the store and the acquire. Run stops it; the deferred Close
	// covers the ways out before Run.
	watchdog := supervise.StartWatchdog(self, os.Stderr, watchdogEnv(format, log.GetLevel(), c.Job, c.WorkerID))
	defer watchdog.Close()
	runLog := log.With().Str("job", c.Job).Str("worker", c.WorkerID).Logger()
	store, err := f.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer store.Close()
	// No signal.Stop: the process ends with this function, and Stop waits
	// for the runtime's signal loop to go idle, which costs every run.
	sigs := make(chan os.Signal, 8)
	signal.Notify(sigs, notified...)

	box := f.hostOutbox()
	deliverOutbox(ctx, box, store, log, c.Safety)
	if err := supervise.BecomeSubreaper(); err != nil {
		runLog.Warn().Err(err).Msg("cannot become a child subreaper; descendants that leave the group will not be tracked")
	}
	status.log = runLog
	child := &supervise.Command{Argv: c.Command, Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Foreground: f.IO.StdinTTY,
		Env: storeEnv(f.Globals)}
	sup := &supervise.Supervisor{
		Store: store,
		Clock: clock.Real{},
		Log:   log,
		Start: func(env []string, pgid int) (supervise.Child, error) {
			status.clear() // the wait is over: its line goes before the child writes
			return child.Start(env, pgid)
		},
		Watchdog:    watchdog,
		Notices:     store,
		Signals:     sigs,
		OnWait:      status.show,
		WatchExit:   supervise.WatchExit,
		Suspend:     supervise.SuspendSelf,
		KillOrphans: supervise.KillOrphans,
	}
	if box != nil {
		sup.Outbox = box
	}
	ending, err := sup.Run(ctx, *c)
	status.clear()
	var code int
	var msg string
	switch {
	case err != nil:
		code, msg = runRefusal(runLog, err, c.Job, opts.ConflictExitCode)
	case ending.Reason == supervise.NotStarted:
		code, msg = runExitCode(ending), ending.Start.Error() // in a shell's words
	default:
		code = runExitCode(ending)
	}
	lastWord(f.IO.ErrOut, runLog, format, code, msg)
	return exitWith(code, nil)
}

// storeEnv is what the child needs to reach the run's own store, so that
// `leasectl token check` inside it asks the store that granted its token,
// however leasectl was given it (flag or environment). The URL goes as
// given, password included: the child runs as the same user, who can read
// it in leasectl's own environment or command line anyway; the README says
// what that exposes.
func storeEnv(g *GlobalOptions) []string {
	return []string{"LEASECTL_STORE=" + g.Store, "LEASECTL_NAMESPACE=" + g.Namespace}
}

// runRefusal is the exit code of a run refused before its child started,
// and the one line that says why. A refusal that exits 0 (a --min-interval
// skip, a conflict mapped to 0 like flock -E 0) says it only at info level:
// cron mails every line.
func runRefusal(log zerolog.Logger, err error, job string, conflictCode int) (int, string) {
	var tooSoon *leasestore.TooSoonError
	var held *leasestore.HeldError
	var quarantined *leasestore.QuarantinedError
	switch {
	case errors.As(err, &tooSoon):
		log.Info().Msgf("skipped: %v", err)
		return exitOK, ""
	case errors.As(err, &quarantined):
		return exitQuarantined, fmt.Sprintf("%v; release it with: leasectl quarantine release %s --reason '...'", err, job)
	case errors.As(err, &held) && conflictCode == exitOK:
		log.Info().Msgf("skipped: %v", err)
		return exitOK, ""
	case errors.As(err, &held):
		return conflictCode, err.Error()
	}
	return exitCode(err), errorMessage(err)
}

func defaultWorkerID(host string, pid int) string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return fmt.Sprintf("%s:%d:%s", host, pid, hex.EncodeToString(b))
}

// waitStatus shows who holds the job while --wait waits: on a terminal in
// the console format, one line on stderr, redrawn at each attempt and
// cleared when the wait ends; otherwise one info line, logged once. It is
// also the run's log writer, so that a line logged while the status shows
// starts on a line of its own.
type waitStatus struct {
	io      *IOStreams
	job     string
	now     func() time.Time
	refresh bool           // redraw a line on the terminal, rather than log once
	log     zerolog.Logger // the run's logger, for the line logged once

	mu     sync.Mutex
	shown  bool // the status line is on the terminal
	logged bool // the wait was logged
}

func (w *waitStatus) show(h *leasestore.HeldError) {
	if !w.refresh {
		if !w.logged {
			w.logged = true
			w.log.Info().Str("holder", h.Holder).Str("host", h.Host).Int("pid", h.PID).Dur("expires_in", h.ExpiresIn).
				Int("position", h.Position).Int("waiting", h.Waiting).Msg("waiting for the lease")
		}
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	fmt.Fprintf(w.io.ErrOut, "\r\x1b[Kwaiting for job %s: ", w.job)
	if h.Holder != "" {
		fmt.Fprintf(w.io.ErrOut, "held by %s on %s (pid %d) for %s, expires in %s",
			h.Holder, h.Host, h.PID, w.now().Sub(h.Since).Round(time.Second), h.ExpiresIn.Round(100*time.Millisecond))
	}
	if h.Position > 0 {
		sep := ""
		if h.Holder != "" {
			sep = "; "
		}
		fmt.Fprintf(w.io.ErrOut, "%s%d of %d in its queue", sep, h.Position, h.Waiting)
	}
	w.shown = true
}

// clear removes the status line, if shown.
func (w *waitStatus) clear() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clearLocked()
}

func (w *waitStatus) clearLocked() {
	if w.shown {
		fmt.Fprint(w.io.ErrOut, "\r\x1b[K")
		w.shown = false
	}
}

// Write writes a log line to stderr, on a line of its own.
func (w *waitStatus) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.clearLocked()
	return w.io.ErrOut.Write(p)
}

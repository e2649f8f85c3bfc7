package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/pflag"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/notify"
)

// NotifyOptions are the --notify-* flags of the reaper (scan --watch,
// serve --reap-interval): where it sends the store's notices.
type NotifyOptions struct {
	Webhooks []string
	Command  string
	Format   string
	Timeout  time.Duration

	// sinks are built by validate.
	sinks []notify.Sink
}

// notifyHelp is what the reaper's help says of notifications.
const notifyHelp = `Every pass records in the store what it saw worth telling people (a crash
counted, a job quarantined, a job overdue or back in time; runs record their
lost leases, their own crashes and the crashes they counted, and 'quarantine
add' and 'release' theirs). --notify-webhook URL (repeatable) POSTs each event as JSON (schema
leasectl.event/v1, with an Idempotency-Key header; --notify-format slack
sends Slack's {"text": ...} instead), and --notify-command CMD runs CMD with
/bin/sh -c, the event's JSON on its stdin. An event is marked sent once
every sink took it (a 2xx answer, exit status 0), retried with backoff
otherwise, across restarts, and sent by one reaper of several.`

func (o *NotifyOptions) addFlags(fl *pflag.FlagSet) {
	fl.StringArrayVar(&o.Webhooks, "notify-webhook", nil, "POST each event to this URL (repeatable)")
	fl.StringVar(&o.Command, "notify-command", "", "run this shell command per event, the event's JSON on stdin")
	fl.StringVar(&o.Format, "notify-format", string(notify.FormatJSON), "webhook body: json (leasectl.event/v1) or slack ({\"text\": ...})")
	fl.DurationVar(&o.Timeout, "notify-timeout", notify.DefaultTimeout, "how long one sink may take with one event")
}

// changed names a --notify-* flag set on fl, if any.
func (o *NotifyOptions) changed(fl *pflag.FlagSet) string {
	for _, name := range []string{"notify-webhook", "notify-command", "notify-format", "notify-timeout"} {
		if fl.Changed(name) {
			return name
		}
	}
	return ""
}

// validate checks the flags and builds the sinks, before any I/O; the
// error is one line, without the webhooks' URLs.
func (o *NotifyOptions) validate() error {
	if !slices.Contains(notify.Formats, notify.Format(o.Format)) {
		return fmt.Errorf("invalid --notify-format %q: want json or slack", o.Format)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("invalid --notify-timeout %s: it must be positive", o.Timeout)
	}
	var sinks []notify.Sink
	for i, raw := range o.Webhooks {
		w, err := notify.NewWebhook(raw, notify.Format(o.Format), nil, "leasectl/"+version)
		if err != nil {
			// Not even redacted: a webhook's path is often its secret.
			return fmt.Errorf("--notify-webhook number %d: %w", i+1, err)
		}
		sinks = append(sinks, w)
	}
	if o.Command != "" {
		c, err := notify.NewCommand(o.Command)
		if err != nil {
			return fmt.Errorf("--notify-command: %w", err)
		}
		sinks = append(sinks, c)
	}
	o.sinks = sinks
	return nil
}

// startNotifier makes reaper record notices, and, when validate built
// sinks, starts delivering them beside the reaper's passes every interval.
// The returned func waits for the delivery to end once ctx is done.
func (o *NotifyOptions) startNotifier(ctx context.Context, store *leasestore.Store, reaper *inspect.Reaper, namespace string,
	interval time.Duration, log zerolog.Logger) (wait func()) {
	reaper.RecordNotices = true
	reaper.NoticeFailed = noticeFailed(log)
	if len(o.sinks) == 0 {
		return func() {}
	}
	host, _ := os.Hostname()
	d := &notify.Deliverer{Store: store, Sinks: o.sinks, Owner: host + ":" + strconv.Itoa(os.Getpid()), Namespace: namespace,
		Timeout: o.Timeout, Log: log}
	reaper.Recorded = d.Kick
	names := make([]string, len(o.sinks))
	for i, s := range o.sinks {
		names[i] = s.String()
		if c, ok := s.(*notify.Command); ok {
			c.Log = log
		}
	}
	log.Info().Strs("sinks", names).Msg("sending notices to " + strings.Join(names, ", "))
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		d.Run(ctx, interval)
	}()
	return wg.Wait
}

// noticeFailed logs a failure to record notices: once, for a registry
// older than notices, and at every pass otherwise.
func noticeFailed(log zerolog.Logger) func(error) {
	var once sync.Once
	return func(err error) {
		if errors.Is(err, errors.ErrUnsupported) {
			once.Do(func() { log.Warn().Err(err).Msg("the store cannot keep notices: no notification will be sent") })
			return
		}
		log.Warn().Err(err).Msg("recording notices failed; trying again at the next pass")
	}
}

// recordNotice records n after an operator's action, warning on stderr
// when it cannot: the action is done, only its notification is lost.
func recordNotice(ctx context.Context, io *IOStreams, s *leasestore.Store, n leasestore.Notice) {
	if err := s.PutNotices(ctx, []leasestore.Notice{n}); err != nil {
		fmt.Fprintf(io.ErrOut, "leasectl: warning: the notice of this action could not be recorded, so it will not be notified: %v\n", err)
	}
}

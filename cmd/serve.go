package cmd

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"

	"github.com/leasectl/leasectl/inspect"
	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/registry"
)

// defaultRateLimit is how many requests a second `serve` takes from one
// client address by default. A heartbeat it refuses counts as a failed
// renewal, so it is set far above what one host's runs need (1,000 runs
// renewing every 10 s make 100 a second); it stops a runaway client, not a
// fleet behind one NAT address, which needs --rate-limit 0 or more.
const defaultRateLimit = 1000

// ServeOptions are `leasectl serve`'s inputs.
type ServeOptions struct {
	IO        *IOStreams
	Globals   *GlobalOptions
	OpenStore func(context.Context) (*leasestore.Store, error)
	Logger    func() (zerolog.Logger, error)

	Listen                    string
	Tokens                    string
	TLSCert, TLSKey, ClientCA string
	ReapInterval              time.Duration
	RateLimit                 float64
	Notify                    NotifyOptions
}

// NewCmdServe builds `leasectl serve`. runF, when not nil, replaces the
// command's work, so a test can stop after flag parsing.
func NewCmdServe(f *Factory, runF func(*ServeOptions) error) *cobra.Command {
	opts := &ServeOptions{IO: f.IO, Globals: f.Globals, OpenStore: f.OpenStore, Logger: f.Logger}
	c := &cobra.Command{
		Use:   "serve --listen ADDR --tokens FILE [--tls-cert FILE --tls-key FILE [--client-ca FILE]]",
		Short: "Serve the execution registry: the store over HTTP, for workers that cannot reach it",
		Long: `Serve the execution registry: an HTTP/JSON API in front of the store
named by --store, so that workers that may not reach the store itself run
their jobs through it with --store https://HOST:PORT (and LEASECTL_TOKEN).
Every operation is one call of the store, so its guarantees hold unchanged.
The API (under /v1/registry) is described in docs/registry-openapi.yaml.

--tokens FILE holds one "ROLE TOKEN" pair a line ('#' starts a comment),
re-read on SIGHUP (with the TLS files). Tokens are at least 16 characters
(openssl rand -hex 32 makes one). Roles are cumulative:
  reader    job status, live leases, quarantined jobs, counts, token checks,
            /metrics
  worker    also acquire, heartbeat, complete, release, wait for a release
  operator  also quarantine, release from quarantine, scan

Without --tls-cert and --tls-key, serve listens only on a loopback address,
over plain HTTP, and says so. --client-ca makes every client present a
certificate that CA signed, as well as its token.

On-call opens the registry's address in a browser: the page at / lists
every job the store knows, each job's history and the quarantined jobs,
live, after a login with a name and a token of the tokens file; operators
also quarantine and release jobs, and stop their runs, from it.

--reap-interval runs the reaper (scan --watch) in the same process, and
serves its metrics at /metrics beside the registry's; with --notify-webhook
or --notify-command it sends the store's events too, as scan --watch does
(see leasectl scan --help). SIGTERM or SIGINT
stops serve gracefully: long-polls are answered, requests in progress get
10 s to finish.

Exit status: 0 after SIGTERM or SIGINT, 64 for bad flags or a tokens or TLS
file that cannot be used, 1 if it cannot listen.`,
		Example: `  # On the host that reaches Redis:
  leasectl serve --store redis://redis.internal:6379/0 --listen :8443 \
      --tokens /etc/leasectl/registry.tokens \
      --tls-cert /etc/leasectl/registry.pem --tls-key /etc/leasectl/registry-key.pem \
      --reap-interval 10s

  # On a worker:
  LEASECTL_STORE=https://registry.internal:8443 LEASECTL_TOKEN=... \
      leasectl run --job nightly-report -- ./report.sh`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			if err := validateServe(opts); err != nil {
				return usageError(err)
			}
			if name := opts.Notify.changed(c.Flags()); name != "" && opts.ReapInterval == 0 {
				return usageError(fmt.Errorf("--%s needs --reap-interval: the reaper sends the notices", name))
			}
			if runF != nil {
				return runF(opts)
			}
			return serveRun(c.Context(), opts)
		},
	}
	fl := c.Flags()
	fl.StringVar(&opts.Listen, "listen", "", "address to serve on, HOST:PORT (a loopback address without TLS)")
	fl.StringVar(&opts.Tokens, "tokens", "", "file of bearer tokens: one \"ROLE TOKEN\" a line, roles worker, operator, reader")
	fl.StringVar(&opts.TLSCert, "tls-cert", "", "TLS certificate (PEM), with --tls-key")
	fl.StringVar(&opts.TLSKey, "tls-key", "", "TLS private key (PEM), with --tls-cert")
	fl.StringVar(&opts.ClientCA, "client-ca", "", "require client certificates signed by this CA (PEM); needs TLS")
	fl.DurationVar(&opts.ReapInterval, "reap-interval", 0, "also run the reaper every this long, with its metrics at /metrics (default: off)")
	fl.Float64Var(&opts.RateLimit, "rate-limit", defaultRateLimit, "requests a second one client address may make, bursts of twice as many; 0: no limit")
	opts.Notify.addFlags(fl)
	_ = c.MarkFlagRequired("listen")
	_ = c.MarkFlagRequired("tokens")
	return c
}

// validateServe checks serve's flags before any I/O.
func validateServe(opts *ServeOptions) error {
	host, _, err := net.SplitHostPort(opts.Listen)
	if err != nil {
		return fmt.Errorf("invalid --listen %q: want HOST:PORT, e.g. 127.0.0.1:8080", opts.Listen)
	}
	tls := opts.TLSCert != "" || opts.TLSKey != ""
	switch {
	case (opts.TLSCert == "") != (opts.TLSKey == ""):
		return errors.New("--tls-cert and --tls-key go together")
	case opts.ClientCA != "" && !tls:
		return errors.New("--client-ca needs --tls-cert and --tls-key")
	case !tls && !loopbackHost(host):
		return fmt.Errorf("without --tls-cert and --tls-key, serve listens only on a loopback address (127.0.0.1, ::1, localhost), not %q: bearer tokens must not cross a network in clear", opts.Listen)
	case opts.ReapInterval < 0:
		return fmt.Errorf("invalid --reap-interval %s: it must be positive", opts.ReapInterval)
	case opts.RateLimit < 0:
		return fmt.Errorf("invalid --rate-limit %g: it must be 0 (no limit) or more", opts.RateLimit)
	}
	if err := opts.Notify.validate(); err != nil {
		return err
	}
	if u, err := url.Parse(opts.Globals.Store); err == nil && (u.Scheme == "http" || u.Scheme == "https") {
		return fmt.Errorf("--store %s is a registry: serve fronts a store (file://, redis://, ...)", leasestore.Redact(opts.Globals.Store))
	}
	return nil
}

// loopbackHost reports whether host names only loopback addresses.
func loopbackHost(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func serveRun(ctx context.Context, opts *ServeOptions) (err error) {
	log, err := opts.Logger()
	if err != nil {
		return err
	}
	tokens, err := registry.LoadTokens(opts.Tokens)
	if err != nil {
		return usageError(err)
	}
	if fi, err := os.Stat(opts.Tokens); err == nil && fi.Mode().Perm()&0o077 != 0 {
		log.Warn().Str("file", opts.Tokens).Str("mode", fi.Mode().Perm().String()).Msg("the tokens file is readable by others than its owner: chmod 600 it")
	}
	var tlsConf *registry.TLS
	if opts.TLSCert != "" {
		if tlsConf, err = registry.LoadTLS(registry.TLSFiles{Cert: opts.TLSCert, Key: opts.TLSKey, ClientCA: opts.ClientCA}); err != nil {
			return usageError(err)
		}
	}
	store, err := opts.OpenStore(ctx)
	if err != nil {
		return err
	}
	defer func() {
		if cerr := store.Close(); cerr != nil && err == nil {
			err = fmt.Errorf("close the store: %w", cerr)
		}
	}()
	var reaperMetrics *inspect.Metrics
	if opts.ReapInterval > 0 {
		reaperMetrics = inspect.NewMetrics()
	}
	srv, err := registry.New(registry.Config{
		Store: store, Namespace: opts.Globals.Namespace, Tokens: tokens, Log: log,
		ReaperMetrics: reaperMetrics, RateLimit: opts.RateLimit,
	})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", opts.Listen)
	if err != nil {
		return fmt.Errorf("serve: %w", err)
	}

	ctx, stop := signal.NotifyContext(ctx, syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go reloadOnHUP(ctx, hup, opts.Tokens, srv, tlsConf, log)

	reaped := make(chan struct{})
	if opts.ReapInterval > 0 {
		go func() {
			defer close(reaped)
			reap(ctx, store, reaperMetrics, opts, log)
		}()
	} else {
		close(reaped)
	}

	scheme := "https"
	if tlsConf == nil {
		scheme = "http"
		log.Warn().Str("addr", ln.Addr().String()).Msg("no --tls-cert: serving plain HTTP, on a loopback address only")
	}
	log.Info().Str("url", scheme+"://"+ln.Addr().String()).Str("store", leasestore.Redact(opts.Globals.Store)).
		Str("namespace", opts.Globals.Namespace).Int("tokens", tokens.Len()).Bool("client_certs", opts.ClientCA != "").
		Msgf("serving the registry on %s://%s until SIGTERM or SIGINT", scheme, ln.Addr())
	serr := srv.Serve(ctx, ln, tlsConf)
	stop()
	<-reaped
	if serr != nil {
		return serr
	}
	log.Info().Msg("registry stopped")
	return nil
}

// reloadOnHUP re-reads the tokens file and the TLS files on every SIGHUP
// until ctx is done; a file that cannot be used is logged and the old
// settings kept.
func reloadOnHUP(ctx context.Context, hup <-chan os.Signal, path string, srv *registry.Server, tlsConf *registry.TLS, log zerolog.Logger) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-hup:
		}
		if tokens, err := registry.LoadTokens(path); err != nil {
			log.Error().Err(err).Msg("SIGHUP: keeping the tokens in use")
		} else {
			srv.SetTokens(tokens)
			log.Info().Int("tokens", tokens.Len()).Msg("SIGHUP: tokens re-read")
		}
		if tlsConf != nil {
			if err := tlsConf.Reload(); err != nil {
				log.Error().Err(err).Msg("SIGHUP: keeping the TLS certificate in use")
			} else {
				log.Info().Msg("SIGHUP: TLS files re-read")
			}
		}
	}
}

// reap runs the reaper every interval until ctx is done, logging what it
// counts.
func reap(ctx context.Context, store *leasestore.Store, m *inspect.Metrics, opts *ServeOptions, log zerolog.Logger) {
	interval := opts.ReapInterval
	reaper := &inspect.Reaper{Store: store, Metrics: m, PassTimeout: max(interval, minPassTimeout),
		OnOverdue:   func(c inspect.OverdueChange) error { logOverdue(log, c); return nil },
		Unsupported: noOverdue(log)}
	defer opts.Notify.startNotifier(ctx, store, reaper, opts.Globals.Namespace, interval, log)()
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	log.Info().Dur("interval", interval).Msg("reaping crashed jobs")
	_ = reaper.Watch(ctx, ticker.C, func(crashes []leasestore.Crash) error {
		for _, c := range crashes {
			log.Warn().Str("job", c.Job).Str("worker", c.Holder).Int64("token", c.Token).Str("host", c.Host).
				Int("crashes", c.Crashes).Bool("quarantined", c.Quarantined).Msg("counted a crash: the run's supervisor vanished")
		}
		return nil
	}, func(err error) { log.Error().Err(err).Msg("reaper pass failed; retrying at the next interval") })
}

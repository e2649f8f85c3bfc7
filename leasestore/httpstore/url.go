package httpstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/leasectl/leasectl/leasestore"
	"github.com/leasectl/leasectl/leasestore/failover"
)

func init() {
	leasestore.Register("https", openURL)
	leasestore.Register("http", openURL)
}

// The environment a remote store reads (docs/design.md §3).
const (
	EnvToken      = "LEASECTL_TOKEN"       // the bearer token
	EnvCAFile     = "LEASECTL_CA_FILE"     // PEM roots trusted besides the system's
	EnvClientCert = "LEASECTL_CLIENT_CERT" // PEM client certificate, for a registry with --client-ca
	EnvClientKey  = "LEASECTL_CLIENT_KEY"  // its key
)

// openURL is the leasestore.Opener of the http and https schemes, with the
// settings in the process's environment.
func openURL(_ context.Context, u *url.URL, namespace string) (leasestore.Driver, error) {
	return Open(u.String(), namespace, Options{
		Token: os.Getenv(EnvToken), CAFile: os.Getenv(EnvCAFile),
		ClientCert: os.Getenv(EnvClientCert), ClientKey: os.Getenv(EnvClientKey),
	})
}

// Options are a remote store's credentials and trust.
type Options struct {
	// Token is the bearer token; empty, every call is refused with a line
	// saying so.
	Token string
	// CAFile holds PEM certificates trusted besides the system's roots.
	CAFile string
	// ClientCert and ClientKey are a PEM client certificate and its key,
	// for a registry that asks for one.
	ClientCert, ClientKey string
}

// Open returns the Store that reaches the registry at rawURL:
// https://host[:port][,host[:port]...][/path] (the path, if any, prefixes
// every route, for a registry behind a reverse proxy), or http:// to
// loopback addresses, with ?region=R to ask only for jobs of region R.
// namespace is sent with every call; the registry refuses one it does not
// serve. Several hosts are registries in front of the same store: a call
// goes to one, and to the next as well when that one breaks the
// connection, answers 502, 503 or 504, or leaves the call unanswered past
// a quarter of its deadline (at most 500 ms; failover.HedgeAfter); a
// registry that went silent is tried last for a while, by the processes
// that start on the host meanwhile too. Long-polls go to one registry.
//
// Open reads the CA and client certificate files but does not contact the
// registry: the first call does. A URL or file it cannot use is a
// *leasestore.URLError.
func Open(rawURL, namespace string, opts Options) (*Store, error) {
	// Go's URL parser takes one host: the URL is parsed with the first,
	// and each host on its own.
	hosts := splitHosts(rawURL)
	u, err := url.Parse(strings.Replace(rawURL, strings.Join(hosts, ","), hosts[0], 1))
	if err != nil {
		return nil, &leasestore.URLError{URL: rawURL, Reason: "not a URL"}
	}
	bad := func(format string, args ...any) error {
		return &leasestore.URLError{URL: rawURL, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, bad("a registry URL is https:// (or http:// to a loopback address)")
	case u.User != nil:
		return nil, bad("no user or password in a registry URL: put the token in %s", EnvToken)
	case u.Fragment != "":
		return nil, bad("no #fragment in a registry URL")
	}
	var bases, shown []string
	for _, host := range hosts {
		h, err := url.Parse(u.Scheme + "://" + host)
		switch {
		case err != nil || h.Host != host || h.Hostname() == "":
			return nil, bad("no host")
		case u.Scheme == "http" && !isLoopback(h.Hostname()):
			return nil, bad("http:// is allowed only to a loopback address (127.0.0.1, ::1, localhost): use https://")
		}
		base := (&url.URL{Scheme: u.Scheme, Host: host, Path: strings.TrimSuffix(u.Path, "/")}).String()
		bases, shown = append(bases, base), append(shown, leasestore.Redact(base))
	}
	q := u.Query()
	region := q.Get("region")
	for k := range q {
		if k != "region" {
			return nil, bad("unknown parameter %q (a registry URL takes ?region=)", k)
		}
	}
	if q.Has("region") {
		if err := leasestore.ValidateRegion(region); err != nil {
			return nil, bad("region: %v", err)
		}
	}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, bad("%s: %v", EnvCAFile, err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, bad("%s %s: no PEM certificate in it", EnvCAFile, opts.CAFile)
		}
		tlsConf.RootCAs = pool
	}
	if (opts.ClientCert == "") != (opts.ClientKey == "") {
		return nil, bad("set both %s and %s, or neither", EnvClientCert, EnvClientKey)
	}
	if opts.ClientCert != "" {
		cert, err := tls.LoadX509KeyPair(opts.ClientCert, opts.ClientKey)
		if err != nil {
			return nil, bad("%s and %s: %v", EnvClientCert, EnvClientKey, err)
		}
		tlsConf.Certificates = []tls.Certificate{cert}
	}
	// HTTP/1.1: a supervisor makes one call at a time (and holds a
	// long-poll on a second connection when it waits), so HTTP/2's
	// multiplexing buys nothing, and Go's HTTP/2 server spent about three
	// times the CPU per heartbeat of HTTP/1.1 in `make bench` (a custom
	// TLS configuration leaves HTTP/2 off unless ForceAttemptHTTP2 is set).
	transport := &http.Transport{
		Proxy:           http.ProxyFromEnvironment,
		DialContext:     (&net.Dialer{KeepAlive: keepAlive}).DialContext,
		TLSClientConfig: tlsConf,
		// A supervisor makes one call at a time, and holds a long-poll
		// when it waits.
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     idleConnTimeout,
	}
	s := &Store{
		registries: failover.New(bases, failover.DefaultNotes()),
		display:    strings.Join(shown, ","),
		client: &http.Client{
			Transport: transport,
			// A registry never redirects: a 3xx comes from something else
			// in between, and following it would send the bearer token on.
			CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
		},
		transport: transport,
		token:     opts.Token,
		namespace: namespace,
		region:    region,
	}
	s.copied = failover.NewCopies(s, "gave up on the copies of its acquire sent to other registries")
	return s, nil
}

// TCP keep-alive probes of a connection to the registry, and how long an
// idle connection is kept for the next call. A run renews every ttl/3
// (10 s by default), so its connection is reused.
const (
	keepAlive       = 15 * time.Second
	idleConnTimeout = 90 * time.Second
)

// splitHosts returns the hosts of rawURL's authority, which a comma
// separates; the authority whole when it is not one.
func splitHosts(rawURL string) []string {
	_, rest, ok := strings.Cut(rawURL, "://")
	if !ok {
		return []string{""}
	}
	if i := strings.IndexAny(rest, "/?#"); i >= 0 {
		rest = rest[:i]
	}
	if strings.Contains(rest, "@") {
		return []string{rest} // user information: refused whole
	}
	return strings.Split(rest, ",")
}

// isLoopback reports whether host is a loopback address or localhost.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

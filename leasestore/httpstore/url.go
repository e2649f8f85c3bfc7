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
func openURL(_ context.Context, u *url.URL, namespace string) (leasestore.Store, error) {
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
// https://host[:port][/path] (the path, if any, prefixes every route, for
// a registry behind a reverse proxy), or http:// to a loopback address,
// with ?region=R to ask only for jobs of region R. namespace is sent with
// every call; the registry refuses one it does not serve.
//
// Open reads the CA and client certificate files but does not contact the
// registry: the first call does. A URL or file it cannot use is a
// *leasestore.URLError.
func Open(rawURL, namespace string, opts Options) (*Store, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &leasestore.URLError{URL: rawURL, Reason: "not a URL"}
	}
	bad := func(format string, args ...any) error {
		return &leasestore.URLError{URL: rawURL, Reason: fmt.Sprintf(format, args...)}
	}
	switch {
	case u.Scheme != "https" && u.Scheme != "http":
		return nil, bad("a registry URL is https:// (or http:// to a loopback address)")
	case u.Host == "" || u.Hostname() == "":
		return nil, bad("no host")
	case u.User != nil:
		return nil, bad("no user or password in a registry URL: put the token in %s", EnvToken)
	case u.Fragment != "":
		return nil, bad("no #fragment in a registry URL")
	case u.Scheme == "http" && !isLoopback(u.Hostname()):
		return nil, bad("http:// is allowed only to a loopback address (127.0.0.1, ::1, localhost): use https://")
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
	base := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: strings.TrimSuffix(u.Path, "/")}
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
	return &Store{
		base:    base,
		display: leasestore.Redact(base.String()),
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
	}, nil
}

// TCP keep-alive probes of a connection to the registry, and how long an
// idle connection is kept for the next call. A run renews every ttl/3
// (10 s by default), so its connection is reused.
const (
	keepAlive       = 15 * time.Second
	idleConnTimeout = 90 * time.Second
)

// isLoopback reports whether host is a loopback address or localhost.
func isLoopback(host string) bool {
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

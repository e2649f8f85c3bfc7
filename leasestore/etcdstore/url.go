package etcdstore

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"

	"github.com/leasectl/leasectl/leasestore"
)

func init() {
	leasestore.Register("etcd", openURL)
	leasestore.Register("etcds", openURL)
}

// openURL is the leasestore.Opener of etcd:// and etcds:// URLs.
func openURL(_ context.Context, u *url.URL, namespace string) (leasestore.Driver, error) {
	return Open(u.String(), namespace)
}

// defaultPort is etcd's client port, used when an endpoint names none.
const defaultPort = "2379"

// Environment variables that complete an etcd URL; a URL's own user
// information and query parameters come first.
const (
	EnvUser     = "LEASECTL_ETCD_USER"
	EnvPassword = "LEASECTL_ETCD_PASSWORD"
	EnvCA       = "LEASECTL_ETCD_CA"
	EnvCert     = "LEASECTL_ETCD_CERT"
	EnvKey      = "LEASECTL_ETCD_KEY"
)

// Open returns a Store on the etcd cluster rawURL names:
//
//	etcd://[user:password@]host[:port][,host[:port]...]
//	etcds://...?ca=/path/ca.pem&cert=/path/client.pem&key=/path/client-key.pem
//
// Each host is a member's client endpoint, port 2379 when left out (of
// several, the last must name its port: Go's URL parser wants it); a call
// goes to one member, and to the next as well when that one breaks the
// connection, says it lost its quorum, or leaves the call unanswered past
// a quarter of its deadline (at most 500 ms; failover.HedgeAfter). A member
// that went silent is tried last for a while, by the processes that start
// on the host meanwhile too. etcds:// speaks TLS, checking the members'
// certificates against ca (the system's roots when left out) and presenting
// cert and key when given. The user and password can also come from
// LEASECTL_ETCD_USER and LEASECTL_ETCD_PASSWORD, and ca, cert and key from
// LEASECTL_ETCD_CA, LEASECTL_ETCD_CERT and LEASECTL_ETCD_KEY; the URL wins.
// It does not contact etcd, nor read the certificate files: the first call
// does. A URL it cannot use is a *leasestore.URLError that never holds the
// password.
func Open(rawURL, namespace string) (*Store, error) {
	if err := leasestore.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	u, err := url.Parse(rawURL)
	if err != nil {
		return nil, &leasestore.URLError{URL: rawURL, Reason: "not a URL"}
	}
	bad := func(reason string) error { return &leasestore.URLError{URL: rawURL, Reason: reason} }
	if u.Scheme != "etcd" && u.Scheme != "etcds" {
		return nil, bad("not an etcd:// or etcds:// URL")
	}
	if u.Host == "" {
		return nil, bad("no endpoint (etcd://host:2379[,host:2379...])")
	}
	if u.Path != "" && u.Path != "/" {
		return nil, bad("an etcd URL has no path (the namespace is --namespace)")
	}
	q := u.Query()
	for k := range q {
		if k != "ca" && k != "cert" && k != "key" {
			return nil, bad(fmt.Sprintf("unknown parameter %q (etcd URLs take ca, cert and key)", k))
		}
	}
	scheme := "http://"
	var tlsConf *tls.Config
	ca, cert, key := param(q, "ca", EnvCA), param(q, "cert", EnvCert), param(q, "key", EnvKey)
	if u.Scheme == "etcds" {
		scheme = "https://"
		if (cert == "") != (key == "") {
			return nil, bad("a client certificate needs both cert and key")
		}
		tlsConf = tlsConfig(ca, cert, key)
	} else if q.Has("ca") || q.Has("cert") || q.Has("key") {
		return nil, bad("ca, cert and key need etcds:// (TLS)")
	}
	var endpoints []string
	for _, hp := range strings.Split(u.Host, ",") {
		host, port, err := net.SplitHostPort(hp)
		if err != nil {
			host, port = hp, defaultPort
		}
		if host == "" {
			return nil, bad(fmt.Sprintf("endpoint %q has no host", hp))
		}
		endpoints = append(endpoints, scheme+net.JoinHostPort(host, port))
	}
	user, password := os.Getenv(EnvUser), os.Getenv(EnvPassword)
	if u.User != nil {
		user = u.User.Username()
		if pw, ok := u.User.Password(); ok {
			password = pw
		}
	}
	if user == "" && password != "" {
		return nil, bad("a password without a user")
	}
	s := &Store{
		c:        newClient(endpoints, tlsConf, user, password),
		ns:       namespace,
		addr:     strings.Join(strings.Split(u.Host, ","), ","),
		password: password,
	}
	s.book = &book{Shelf: (*noticeShelf)(s)}
	return s, nil
}

// param is query parameter name, or else environment variable env.
func param(q url.Values, name, env string) string {
	if v := q.Get(name); v != "" {
		return v
	}
	return os.Getenv(env)
}

// tlsConfig returns the TLS configuration of etcds:// URLs. The files are
// read at the first handshake, not here, so that opening stays free of
// I/O; a file that cannot be read fails that handshake with its path.
func tlsConfig(ca, cert, key string) *tls.Config {
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if cert != "" {
		conf.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) {
			c, err := tls.LoadX509KeyPair(cert, key)
			if err != nil {
				return nil, fmt.Errorf("client certificate %s / %s: %w", cert, key, err)
			}
			return &c, nil
		}
	}
	if ca != "" {
		// Verify against ca alone: InsecureSkipVerify only turns off the
		// default verification, which VerifyConnection replaces.
		conf.InsecureSkipVerify = true
		conf.VerifyConnection = func(cs tls.ConnectionState) error {
			pem, err := os.ReadFile(ca)
			if err != nil {
				return fmt.Errorf("CA file: %w", err)
			}
			roots := x509.NewCertPool()
			if !roots.AppendCertsFromPEM(pem) {
				return fmt.Errorf("CA file %s holds no PEM certificate", ca)
			}
			opts := x509.VerifyOptions{Roots: roots, DNSName: cs.ServerName, Intermediates: x509.NewCertPool()}
			for _, c := range cs.PeerCertificates[1:] {
				opts.Intermediates.AddCert(c)
			}
			if _, err := cs.PeerCertificates[0].Verify(opts); err != nil {
				return &tls.CertificateVerificationError{UnverifiedCertificates: cs.PeerCertificates, Err: err}
			}
			return nil
		}
	}
	return conf
}

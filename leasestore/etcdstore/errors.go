package etcdstore

import (
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"strings"

	"github.com/leasectl/leasectl/leasestore"
)

var (
	// errUnexpected is an answer that is not what the request asks for.
	errUnexpected = errors.New("unexpected answer from etcd")
	// errContention is an operation that gave up after maxConflicts
	// transactions found the job changed since they read it.
	errContention = errors.New("the job's keys kept changing under every attempt")
)

// unavailable wraps a failure in an *UnavailableError whose one-line message
// names the cause and never holds the password.
func (s *Store) unavailable(op string, err error) error {
	return leasestore.Unavailable(op, s.explain(err), err, s.password)
}

// explain names the cause of a failure talking to etcd.
func (s *Store) explain(err error) string {
	var e *etcdError
	var opErr *net.OpError
	var certErr *tls.CertificateVerificationError
	switch {
	case errors.As(err, &e):
		msg := strings.TrimPrefix(e.Error(), "etcdserver: ")
		switch {
		case e.Code == codeUnauthenticated || e.Code == codeInvalidArgument && strings.Contains(msg, "authentication failed"):
			return "etcd refused the credentials: " + msg
		case strings.Contains(msg, "user name is empty"):
			return "etcd requires a user and password (etcd://user:password@host:2379, or " + EnvUser + " and " + EnvPassword + ")"
		case e.Code == codePermissionDenied:
			return "etcd denies leasectl a key it needs (grant the role readwrite on the namespace's prefix): " + msg
		case e.Code == codeUnavailable:
			return fmt.Sprintf("etcd at %s cannot serve: %s", s.addr, msg)
		}
		return "etcd: " + msg
	case errors.As(err, &certErr):
		return fmt.Sprintf("the certificate of etcd at %s is not trusted (give its CA with ca= or %s): %v", s.addr, EnvCA, certErr.Err)
	case errors.As(err, &opErr) && opErr.Op == "remote error": // an alert from the TLS peer
		return fmt.Sprintf("etcd at %s refused the TLS handshake (%v): does it want a client certificate (cert= and key=, or %s and %s)?", s.addr, opErr.Err, EnvCert, EnvKey)
	}
	if msg, ok := leasestore.ExplainTransport("etcd at "+s.addr, "etcd", err); ok {
		return msg
	}
	return fmt.Sprintf("etcd at %s: %s", s.addr, leasestore.FirstLine(err.Error()))
}

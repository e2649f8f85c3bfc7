package pgstore

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/leasestore"
)

// unavailable wraps a failure in an *UnavailableError whose message names
// the cause in one line and never holds the password.
func (s *Store) unavailable(op string, err error) error {
	return leasestore.Unavailable(op, s.explain(err), err, s.password)
}

// explain names the cause of a failure for an operator.
func (s *Store) explain(err error) string {
	var newer *NewerSchemaError
	if errors.As(err, &newer) {
		return newer.Error()
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return s.explainServer(pe)
	}
	var certErr *tls.CertificateVerificationError
	var unknownAuthority x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	switch {
	case errors.Is(err, leasestore.ErrClosed):
		return leasestore.ErrClosed.Error()
	case pgconn.Timeout(err):
		return fmt.Sprintf("no answer from %s before the deadline", s.server())
	case errors.As(err, &certErr) || errors.As(err, &unknownAuthority) || errors.As(err, &hostErr):
		return fmt.Sprintf("the TLS certificate of %s is not trusted: %s", s.server(), lastPart(err))
	}
	if msg, ok := leasestore.ExplainTransport(s.server(), "PostgreSQL", err); ok {
		return msg
	}
	var connErr *pgconn.ConnectError
	if errors.As(err, &connErr) {
		// pgconn's message names the user, database and address of each
		// attempt; the cause is the innermost part of the last one.
		return fmt.Sprintf("cannot connect to %s: %s", s.server(), leasestore.FirstLine(innermost(connErr).Error()))
	}
	return fmt.Sprintf("%s: %s", s.server(), leasestore.FirstLine(err.Error()))
}

// explainServer names the cause of an error the server reported.
func (s *Store) explainServer(pe *pgconn.PgError) string {
	schema := quoteIdent(schemaName(s.ns))
	switch pe.Code {
	case "28P01", "28000": // invalid_password, invalid_authorization_specification
		return fmt.Sprintf("%s refused the credentials: %s", s.server(), pe.Message)
	case "3D000": // invalid_catalog_name
		return fmt.Sprintf("%s: %s", s.server(), pe.Message)
	case "42501": // insufficient_privilege
		return fmt.Sprintf("the PostgreSQL role %s lacks a right leasectl needs: %s (run `leasectl store migrate` as a role that may create or own schema %s, then GRANT USAGE ON SCHEMA %s TO %[1]s)",
			quoteIdent(s.cfg.User), pe.Message, schema, schema)
	case "25006": // read_only_sql_transaction
		return fmt.Sprintf("%s refuses writes: %s (default_transaction_read_only is on, or the server is a standby)", s.server(), pe.Message)
	case "57P01", "57P02", "57P03": // admin_shutdown, crash_shutdown, cannot_connect_now
		return fmt.Sprintf("%s is shutting down or starting up: %s", s.server(), pe.Message)
	case "53300": // too_many_connections
		return fmt.Sprintf("%s has no connection slot left: %s", s.server(), pe.Message)
	case "53100": // disk_full
		return fmt.Sprintf("%s is out of disk space: %s", s.server(), pe.Message)
	case codeVersion:
		return fmt.Sprintf("schema %s: %s", schema, pe.Message)
	}
	return fmt.Sprintf("%s: %s (SQLSTATE %s)", s.server(), pe.Message, pe.Code)
}

// server names the PostgreSQL server in messages.
func (s *Store) server() string {
	if s.addr == "" {
		return "PostgreSQL"
	}
	return "PostgreSQL at " + s.addr
}

// lastPart is the innermost part of an error message of the form "a: b: c".
func lastPart(err error) string {
	msg := leasestore.FirstLine(err.Error())
	if i := strings.LastIndex(msg, ": "); i >= 0 {
		return msg[i+2:]
	}
	return msg
}

// innermost is the error at the bottom of err's chain, following the last
// of joined errors.
func innermost(err error) error {
	for {
		switch u := err.(type) {
		case interface{ Unwrap() []error }:
			errs := u.Unwrap()
			if len(errs) == 0 {
				return err
			}
			err = errs[len(errs)-1]
		case interface{ Unwrap() error }:
			next := u.Unwrap()
			if next == nil {
				return err
			}
			err = next
		default:
			return err
		}
	}
}

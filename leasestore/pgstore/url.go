package pgstore

import (
	"context"
	"net"
	"net/url"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/leasectl/leasectl/leasestore"
)

func init() {
	leasestore.Register("postgres", openURL)
	leasestore.Register("postgresql", openURL)
}

// openURL is the leasestore.Opener of postgres:// and postgresql:// URLs.
func openURL(_ context.Context, u *url.URL, namespace string) (leasestore.Driver, error) {
	return Open(u.String(), namespace)
}

// defaultApplicationName names leasectl's sessions in pg_stat_activity
// unless the URL names them otherwise (?application_name=...).
const defaultApplicationName = "leasectl"

// Open returns a Store on the PostgreSQL server rawURL names, keeping
// namespace's data in the schema of that name. The URL is libpq's:
// postgres://[user[:password]@][host][:port][/dbname][?param=value&...],
// with sslmode, sslrootcert, connect_timeout, host=/socket/dir and the
// other libpq parameters; what it leaves out comes from the PG*
// environment variables (PGHOST, PGUSER, PGPASSWORD, PGSSLMODE, ...), the
// password from ~/.pgpass (or PGPASSFILE) when neither gives one, as libpq
// does. It does not contact the server: the first operation does, and
// creates or migrates the schema if needed. A URL it cannot use is a
// *leasestore.URLError that never holds the password.
func Open(rawURL, namespace string) (*Store, error) {
	if err := leasestore.ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	if strings.HasPrefix(schemaName(namespace), "pg_") {
		return nil, &leasestore.NamespaceError{Namespace: namespace,
			Reason: "PostgreSQL reserves schema names that start with pg_"}
	}
	u, err := url.Parse(rawURL)
	if err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		return nil, &leasestore.URLError{URL: rawURL, Reason: "not a postgres:// or postgresql:// URL"}
	}
	cfg, err := pgconn.ParseConfig(rawURL)
	if err != nil {
		reason := err.Error()
		// pgconn's message repeats the URL, its password redacted; the
		// URLError shows the URL already.
		if i := strings.Index(reason, "`: "); i >= 0 {
			reason = reason[i+3:]
		}
		reason = leasestore.Scrub(reason, leasestore.URLSecrets(u)...)
		return nil, &leasestore.URLError{URL: rawURL, Reason: reason}
	}
	if cfg.RuntimeParams["application_name"] == "" {
		cfg.RuntimeParams["application_name"] = defaultApplicationName
	}
	s := &Store{
		cfg:       cfg,
		ns:        namespace,
		password:  cfg.Password,
		preferTLS: preferTLS(cfg),
		idle:      make(chan *pgconn.PgConn, poolSize),
		slots:     make(chan struct{}, poolSize),
	}
	s.book = &book{Shelf: (*noticeShelf)(s)}
	if strings.HasPrefix(cfg.Host, "/") {
		s.addr = cfg.Host
	} else {
		s.addr = net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port)))
	}
	s.prepareStatements()
	return s, nil
}

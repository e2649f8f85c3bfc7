package leasestore

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"sync"
)

// Opener opens the driver of the store that u names, keeping its data under namespace (a
// valid one: Open checks it). A driver registers one Opener per URL scheme.
// It must not talk to its backend: the first operation does, so that
// start-up stays cheap and errors surface with the operation that met them.
// A URL it cannot use is a *URLError.
type Opener func(ctx context.Context, u *url.URL, namespace string) (Driver, error)

// DefaultScheme is the scheme of the store Open opens for an empty URL: the
// embedded store in its default folder. Its opener gets a URL with an empty
// path.
const DefaultScheme = "file"

var (
	openersMu sync.RWMutex
	openers   = map[string]Opener{}
)

// Register makes open the Opener for URLs of scheme. Drivers call it from
// their init function; registering a scheme twice is a programming error
// and panics, as it would with database/sql.
func Register(scheme string, open Opener) {
	openersMu.Lock()
	defer openersMu.Unlock()
	if _, dup := openers[scheme]; dup {
		panic("leasestore: Register called twice for scheme " + scheme)
	}
	openers[scheme] = open
}

// Schemes lists the registered URL schemes, sorted.
func Schemes() []string {
	openersMu.RLock()
	defer openersMu.RUnlock()
	list := make([]string, 0, len(openers))
	for s := range openers {
		list = append(list, s)
	}
	slices.Sort(list)
	return list
}

// Open opens the store rawURL names with the driver registered for its
// scheme, keeping its data under namespace. An empty rawURL opens the
// embedded store in its default folder. A URL or namespace that cannot be
// used is a *URLError or a *NamespaceError; neither holds a password.
func Open(ctx context.Context, rawURL, namespace string) (*Store, error) {
	if err := ValidateNamespace(namespace); err != nil {
		return nil, err
	}
	u := &url.URL{Scheme: DefaultScheme}
	if rawURL != "" {
		var err error
		if u, err = url.Parse(rawURL); err != nil {
			return nil, &URLError{URL: rawURL, Reason: unparsable(rawURL, err)}
		}
	}
	openersMu.RLock()
	open, ok := openers[u.Scheme]
	openersMu.RUnlock()
	if pkg := driverPackages[u.Scheme]; !ok && pkg != "" {
		return nil, &URLError{URL: rawURL, Reason: fmt.Sprintf("no driver for %s:// is linked in: import _ %q", u.Scheme, pkg)}
	}
	if !ok {
		reason := fmt.Sprintf("unknown scheme %q", u.Scheme)
		if u.Scheme == "" {
			reason = "no scheme"
		}
		return nil, &URLError{URL: rawURL, Reason: reason + " (use " + schemeList() + ")"}
	}
	d, err := open(ctx, u, namespace)
	if err != nil {
		// A driver sees the parsed URL, which writes etcd:// back as
		// etcd:; the user is shown what they typed.
		var ue *URLError
		if errors.As(err, &ue) && rawURL != "" {
			ue.URL = rawURL
		}
		return nil, err
	}
	return New(d), nil
}

// driverPackages are the packages of leasectl's own drivers by the URL
// schemes they register, so that a program which linked none for a scheme
// is told what to import.
var driverPackages = map[string]string{
	"file":           "github.com/leasectl/leasectl/leasestore/filestore",
	"redis":          "github.com/leasectl/leasectl/leasestore/redisstore",
	"rediss":         "github.com/leasectl/leasectl/leasestore/redisstore",
	"redis+cluster":  "github.com/leasectl/leasectl/leasestore/redisstore",
	"rediss+cluster": "github.com/leasectl/leasectl/leasestore/redisstore",
	"etcd":           "github.com/leasectl/leasectl/leasestore/etcdstore",
	"etcds":          "github.com/leasectl/leasectl/leasestore/etcdstore",
	"postgres":       "github.com/leasectl/leasectl/leasestore/pgstore",
	"postgresql":     "github.com/leasectl/leasectl/leasestore/pgstore",
	"http":           "github.com/leasectl/leasectl/leasestore/httpstore",
	"https":          "github.com/leasectl/leasectl/leasestore/httpstore",
}

// PercentHint tells how to write the characters a URL reserves when they
// are part of a user name or password; drivers add it to their URL errors.
const PercentHint = "percent-encode special characters in the user and password: %40 for @, %3A for :, %2F for /, %3F for ?, %23 for #, %25 for %"

// unparsable says why url.Parse refused raw, without quoting any of it:
// the part it chokes on may be a piece of a password. url.Parse gives no
// typed reasons, so its error text is read; an unknown text gets the
// general hint.
func unparsable(raw string, err error) string {
	_, rest, hasScheme := strings.Cut(raw, "://")
	if !hasScheme {
		return "no scheme (use " + schemeList() + ")"
	}
	msg := err.Error()
	var ue *url.Error
	if errors.As(err, &ue) {
		msg = ue.Err.Error()
	}
	switch {
	case strings.HasPrefix(msg, "invalid URL escape"):
		return "a % must start a percent-encoded byte: write %25 for a literal % (" + PercentHint + ")"
	case strings.HasPrefix(msg, "invalid port") && strings.Contains(rest, "@"):
		return "the host part ends early, at a character of the user or password: " + PercentHint
	case strings.HasPrefix(msg, "invalid port"):
		return "the port must be a number"
	default:
		return "not a URL (" + PercentHint + ")"
	}
}

// schemeList names the registered schemes for an error message.
func schemeList() string {
	var b strings.Builder
	for i, s := range Schemes() {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(s + "://")
	}
	return b.String()
}

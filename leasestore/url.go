package leasestore

import (
	"fmt"
	"net/url"
	"strings"
)

// URLError is a store URL that cannot be used. Its message shows the URL
// with any password redacted.
type URLError struct {
	URL    string // as given, password included: never print it
	Reason string
}

// Error names the redacted URL and what is wrong with it.
func (e *URLError) Error() string {
	return fmt.Sprintf("invalid store URL %s: %s", Redact(e.URL), e.Reason)
}

// Redact returns raw with any password replaced by "xxxxx", for logs and
// errors: the user information's password, and the value of every query
// parameter whose name holds "password", "secret" or "token" (go-redis reads
// ?password=, ?sentinel_password=). A string that does not parse as a URL
// (or has an @ it did not read as the end of a password) is shown as typed
// but for what may be a password: everything between the user name and the
// last @, and the values of secret-looking query parameters.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	// An @ the parser did not take for the end of a user's password (one
	// after a # or a / in it) may follow a piece of one.
	if err != nil || u.User == nil && strings.Contains(raw, "@") {
		return redactText(raw)
	}
	if q, err := url.ParseQuery(u.RawQuery); err != nil {
		u.RawQuery = "<unparsable query>"
	} else if redactQuery(q) {
		u.RawQuery = q.Encode()
	}
	s := u.Redacted()
	// url.URL writes "etcd:" for "etcd://": keep the slashes typed.
	if u.Scheme != "" && strings.HasPrefix(raw, u.Scheme+"://") && !strings.HasPrefix(s, u.Scheme+"://") {
		s = u.Scheme + "://" + strings.TrimPrefix(s, u.Scheme+":")
	}
	return s
}

// redactText is Redact for a string url.Parse refused: what was typed,
// with what may be a password masked, since the part it chokes on may be a
// piece of one (an @ or : not percent-encoded).
func redactText(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		scheme, rest = "", raw
	} else {
		scheme += "://"
	}
	if at := strings.LastIndex(rest, "@"); at >= 0 {
		if user, _, hasPassword := strings.Cut(rest[:at], ":"); hasPassword {
			rest = user + ":xxxxx" + rest[at:]
		}
	}
	if base, query, hasQuery := strings.Cut(rest, "?"); hasQuery {
		params := strings.Split(query, "&")
		for i, p := range params {
			if name, _, hasValue := strings.Cut(p, "="); hasValue && secretName(name) {
				params[i] = name + "=xxxxx"
			}
		}
		rest = base + "?" + strings.Join(params, "&")
	}
	return scheme + rest
}

// redactQuery replaces the values of secret-looking parameters in q and
// reports whether it replaced any.
func redactQuery(q url.Values) bool {
	changed := false
	for k, vs := range q {
		if !secretName(k) {
			continue
		}
		for i := range vs {
			vs[i] = "xxxxx"
		}
		changed = true
	}
	return changed
}

// secretName reports whether a query parameter's name says it holds a
// secret.
func secretName(name string) bool {
	name = strings.ToLower(name)
	return strings.Contains(name, "password") || strings.Contains(name, "secret") || strings.Contains(name, "token")
}

// URLSecrets are the passwords u carries, in its user information or in
// query parameters whose name holds "password", for drivers to scrub from
// messages with Scrub.
func URLSecrets(u *url.URL) []string {
	var list []string
	if pw, ok := u.User.Password(); ok && pw != "" {
		list = append(list, pw)
	}
	for k, vs := range u.Query() {
		if strings.Contains(strings.ToLower(k), "password") {
			list = append(list, vs...)
		}
	}
	return list
}

// Scrub replaces every secret in msg by "xxxxx": a driver's last guard,
// should a server or a library ever echo a password in an error.
func Scrub(msg string, secrets ...string) string {
	for _, secret := range secrets {
		if secret != "" {
			msg = strings.ReplaceAll(msg, secret, "xxxxx")
		}
	}
	return msg
}

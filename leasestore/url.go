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
// is replaced whole, since it may hold a password in a form we cannot pick
// out.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	if q, err := url.ParseQuery(u.RawQuery); err != nil {
		u.RawQuery = "<unparsable query>"
	} else if redactQuery(q) {
		u.RawQuery = q.Encode()
	}
	return u.Redacted()
}

// redactQuery replaces the values of secret-looking parameters in q and
// reports whether it replaced any.
func redactQuery(q url.Values) bool {
	changed := false
	for k, vs := range q {
		name := strings.ToLower(k)
		if !strings.Contains(name, "password") && !strings.Contains(name, "secret") && !strings.Contains(name, "token") {
			continue
		}
		for i := range vs {
			vs[i] = "xxxxx"
		}
		changed = true
	}
	return changed
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

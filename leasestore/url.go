package leasestore

import (
	"fmt"
	"net/url"
	"os"
	"path/filepath"
)

// Kind is the kind of store a URL names.
type Kind int

// Store kinds.
const (
	KindEmbedded Kind = iota // a local file; the default
	KindRedis                // redis:// or rediss://
)

// Location is a parsed --store value.
type Location struct {
	Kind Kind
	Dir  string // KindEmbedded: the folder holding the store's files
	URL  string // KindRedis: the URL as given (with its password)
}

// ParseLocation parses a --store value: empty for the embedded store in its
// default folder, file:///abs/dir for the embedded store elsewhere, or
// redis://[user:password@]host[:port][/db] and rediss://... for Redis. The
// error never contains the password.
func ParseLocation(raw string) (Location, error) {
	if raw == "" {
		dir, err := DefaultDir()
		if err != nil {
			return Location{}, err
		}
		return Location{Kind: KindEmbedded, Dir: dir}, nil
	}
	u, err := url.Parse(raw)
	if err != nil {
		return Location{}, fmt.Errorf("invalid store URL %s: not a URL", Redact(raw))
	}
	switch u.Scheme {
	case "file":
		if u.Host != "" && u.Host != "localhost" {
			return Location{}, fmt.Errorf("invalid store URL %s: a file URL names a local folder (file:///path)", Redact(raw))
		}
		if !filepath.IsAbs(u.Path) {
			return Location{}, fmt.Errorf("invalid store URL %s: the folder must be an absolute path", Redact(raw))
		}
		return Location{Kind: KindEmbedded, Dir: filepath.Clean(u.Path)}, nil
	case "redis", "rediss":
		if u.Host == "" {
			return Location{}, fmt.Errorf("invalid store URL %s: no host", Redact(raw))
		}
		if u.Path != "" && u.Path != "/" {
			var db int
			if _, err := fmt.Sscanf(u.Path, "/%d", &db); err != nil || db < 0 || fmt.Sprintf("/%d", db) != u.Path {
				return Location{}, fmt.Errorf("invalid store URL %s: the path must be a database number like /0", Redact(raw))
			}
		}
		return Location{Kind: KindRedis, URL: raw}, nil
	case "":
		return Location{}, fmt.Errorf("invalid store URL %s: no scheme (use redis://, rediss:// or file:///path)", Redact(raw))
	default:
		return Location{}, fmt.Errorf("invalid store URL %s: unknown scheme %q (use redis://, rediss:// or file:///path)", Redact(raw), u.Scheme)
	}
}

// Redact returns raw with any password replaced by "xxxxx", for logs and
// errors. A string that does not parse as a URL is replaced whole, since it
// may hold a password in a form we cannot pick out.
func Redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "<unparsable URL>"
	}
	return u.Redacted()
}

// DefaultDir is the embedded store's folder: $XDG_STATE_HOME/leasectl, or
// ~/.local/state/leasectl when XDG_STATE_HOME is unset or not absolute.
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "leasectl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot find the embedded store's folder: set XDG_STATE_HOME or HOME: %w", err)
	}
	return filepath.Join(home, ".local", "state", "leasectl"), nil
}

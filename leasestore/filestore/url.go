package filestore

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"path/filepath"

	"github.com/leasectl/leasectl/leasestore"
)

func init() { leasestore.Register("file", openURL) }

// openURL opens the store a file URL names: file:///abs/dir, or the default
// folder when the path is empty (leasestore.Open's empty URL).
func openURL(_ context.Context, u *url.URL, namespace string) (leasestore.Store, error) {
	raw := u.String()
	if u.Host != "" && u.Host != "localhost" {
		return nil, &leasestore.URLError{URL: raw, Reason: "a file URL names a local folder (file:///path)"}
	}
	if u.RawQuery != "" || u.User != nil {
		return nil, &leasestore.URLError{URL: raw, Reason: "a file URL takes no user or query parameters"}
	}
	dir := u.Path
	if dir == "" && u.Opaque == "" && u.Host == "" {
		var err error
		if dir, err = DefaultDir(); err != nil {
			return nil, err
		}
	} else if !filepath.IsAbs(dir) {
		return nil, &leasestore.URLError{URL: raw, Reason: "the folder must be an absolute path (file:///path)"}
	}
	return Open(filepath.Clean(dir), namespace)
}

// DefaultDir is the embedded store's folder: $XDG_STATE_HOME/leasectl, or
// ~/.local/state/leasectl when XDG_STATE_HOME is unset or not absolute. A
// home that does not exist (a system account's) is an *UnavailableError
// naming both ways to choose a folder.
func DefaultDir() (string, error) {
	if d := os.Getenv("XDG_STATE_HOME"); filepath.IsAbs(d) {
		return filepath.Join(d, "leasectl"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", &leasestore.UnavailableError{Op: "open", Err: fmt.Errorf("cannot find the embedded store's folder: set XDG_STATE_HOME or HOME, or name a store with --store: %w", err)}
	}
	if _, err := os.Stat(home); errors.Is(err, fs.ErrNotExist) {
		return "", &leasestore.UnavailableError{Op: "open", Err: fmt.Errorf("the embedded store's folder would be under HOME (%s), which does not exist: set XDG_STATE_HOME to a folder this user may write, or name a store with --store (e.g. file:///var/lib/leasectl)", home)}
	}
	return filepath.Join(home, ".local", "state", "leasectl"), nil
}

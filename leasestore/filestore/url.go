package filestore

import (
	"context"
	"net/url"
	"path/filepath"

	"github.com/leasectl/leasectl/leasestore"
)

func init() { leasestore.Register("file", openURL) }

// openURL opens the store a file URL names: file:///abs/dir, or the default
// folder when the path is empty (leasestore.Open's empty URL).
func openURL(_ context.Context, u *url.URL, namespace string) (leasestore.Driver, error) {
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
		if dir, err = leasestore.StateDir(); err != nil {
			return nil, err
		}
	} else if !filepath.IsAbs(dir) {
		return nil, &leasestore.URLError{URL: raw, Reason: "the folder must be an absolute path (file:///path)"}
	}
	return Open(filepath.Clean(dir), namespace)
}
